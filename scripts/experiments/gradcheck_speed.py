#!/usr/bin/env python3
"""The cost of a check on a large input: tapegrad-gradcheck's modes
(fast, directional, full) against torch.autograd.gradcheck(fast_mode=True)
on LayerNorm (x, gamma, beta) of the same shape, default 64x256, float64,
one thread each.

The tool runs each mode over SEEDS seeds in one process (`check layernorm
--shape SHAPE --mode M --seeds N --format json`) and the time of a check is
its summary's check_seconds over the checks run (the check alone, not the
making of the inputs). Full mode costs two forwards per element, so it runs
FULL_SEEDS seeds. PyTorch gets inputs drawn as the tool draws them (x
uniform in [-2, 2), gamma and beta as `list layernorm` says; the time does
not depend on the values) and the same step and tolerances (eps=1e-6,
atol=1e-5, rtol=1e-3); its time is the mean over SEEDS calls after one
warm-up call. Jacobian mode (and PyTorch's slow mode) compare every one of
the 16384 x 16384 entries at 64x256: not run.

Prints a table and writes OUT/gradcheck_speed.md (the one quoted in
docs/gradcheck-guide.md). Needs PyTorch for its column (without it, the
tool's modes alone).
Usage: python3 scripts/experiments/gradcheck_speed.py
Environment: TOOL (build/tools/tapegrad-gradcheck), OUT (out/experiments),
SHAPE (64x256), SEEDS (100), FULL_SEEDS (2).
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("TOOL", os.path.join(ROOT, "build/tools/tapegrad-gradcheck"))
OUT = os.environ.get("OUT", os.path.join(ROOT, "out/experiments"))
SHAPE = os.environ.get("SHAPE", "64x256")
SEEDS = int(os.environ.get("SEEDS", "100"))
FULL_SEEDS = int(os.environ.get("FULL_SEEDS", "2"))


def tool_time(mode, seeds):
    """Seconds a check, forwards and backwards of the first, verdicts."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [TOOL, "check", "layernorm", "--shape", SHAPE, "--mode", mode, "--seeds", str(seeds), "--format", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("%s exited %d (want 0: every check passes)\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    d = json.loads(p.stdout)
    s = d["summary"]
    checks = sum(s["checks"].values())
    # with --seeds the per-check results are in "checks" only for one seed; a
    # single run gives its counts
    one = subprocess.run(cmd[:-4] + ["--format", "json"], capture_output=True, text=True, env=env)
    r = json.loads(one.stdout)["checks"][0]["result"]
    return s["check_seconds"] / checks, r["n_evals"], r["n_backwards"], r["n_checked"]


def torch_time():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    rows, cols = (int(v) for v in SHAPE.split("x"))

    def fn(x, g, b):
        return torch.nn.functional.layer_norm(x, (cols,), g, b, 1e-5)

    gen = torch.Generator().manual_seed(0)

    def inputs():
        x = torch.rand(rows, cols, dtype=torch.float64, generator=gen) * 4 - 2
        g = torch.rand(cols, dtype=torch.float64, generator=gen) + 0.5
        b = torch.rand(cols, dtype=torch.float64, generator=gen) * 4 - 2
        return [t.requires_grad_(True) for t in (x, g, b)]

    kw = dict(eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)
    torch.autograd.gradcheck(fn, inputs(), **kw)  # warm-up
    secs = 0.0
    for _ in range(SEEDS):
        args = inputs()
        t0 = time.perf_counter()
        ok = torch.autograd.gradcheck(fn, args, **kw)
        secs += time.perf_counter() - t0
        if not ok:
            sys.exit("torch fast mode failed on a correct LayerNorm")
    return secs / SEEDS


def main():
    os.makedirs(OUT, exist_ok=True)
    rows = []
    for mode, seeds in (("fast", SEEDS), ("directional", SEEDS), ("full", FULL_SEEDS)):
        t, evals, backs, checked = tool_time(mode, seeds)
        rows.append(("tapegrad %s" % mode, t, "%d forwards, %d backward, %d comparison%s" %
                     (evals, backs, checked, "" if checked == 1 else "s"), seeds))
    tt = torch_time()
    if tt is not None:
        rows.append(("torch fast_mode=True", tt, "1 + 2 per input forwards, 2 backwards, 1 comparison per input",
                     SEEDS))
    ref = rows[-1][1] if tt is not None else rows[0][1]
    refname = "torch fast" if tt is not None else "tapegrad fast"
    md = ["LayerNorm %s float64 (x, gamma, beta), one thread; time a check, mean over the checks run" % SHAPE, "",
          "| check | time a check | / %s | evaluations | checks run |" % refname, "|---|---|---|---|---|"]
    for name, t, what, n in rows:
        md.append("| %s | %.0f us | %.2f | %s | %d |" % (name, 1e6 * t, t / ref, what, n))
    text = "\n".join(md) + "\n"
    with open(os.path.join(OUT, "gradcheck_speed.md"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
