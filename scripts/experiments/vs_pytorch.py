#!/usr/bin/env python3
"""Experiment 3 of docs/experiments.md: tapegrad-gradcheck against PyTorch's
torch.autograd.gradcheck (slow mode: every Jacobian entry; fast mode: one
random projection u^T J v), on the same functions and the same inputs.

For each case (a correct norm, or one of the tool's seeded bugs), the tool
runs its own check over SEEDS seeds in one process per mode (full,
directional, jacobian; float64, the defaults: h 1e-6, atol 1e-5, rtol 1e-3)
and prints every seed's inputs as JSON (--print-inputs). The script builds
the same function in PyTorch -- the forward, and the same wrong backward as
a torch.autograd.Function -- and runs gradcheck on those very inputs with
the same step and tolerances (eps=1e-6, atol=1e-5, rtol=1e-3). A bug is
detected when the check fails.

Writes OUT/vs_pytorch.csv, OUT/vs_pytorch.md (the table in the doc) and
docs/img/vs_pytorch.png. Needs PyTorch (the CI does not run this).
Usage: python3 scripts/experiments/vs_pytorch.py   (a python3 that has torch)
Environment: TOOL, OUT (as the shell experiments), SEEDS (default 100).
"""
import csv
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(ROOT)
TOOL = os.environ.get("TOOL", "build/tools/tapegrad-gradcheck")
OUT = os.environ.get("OUT", "out/experiments")
IMG = os.environ.get("IMG", "docs/img")
SEEDS = int(os.environ.get("SEEDS", "100"))
os.makedirs(OUT, exist_ok=True)
torch.set_num_threads(1)

# (label, tool op, bug or None, spec)
CASES = [
    ("RMSNorm, correct", "rmsnorm", None, "4x8"),
    ("rmsnorm-sum", "rmsnorm", "rmsnorm-sum", "4x8"),
    ("rmsnorm-no-eps, eps 0.1", "rmsnorm", "rmsnorm-no-eps", "4x8;eps=0.1"),
    ("rmsnorm-no-eps, eps 1e-3", "rmsnorm", "rmsnorm-no-eps", "4x8;eps=1e-3"),
    ("rmsnorm-scale 1e-2", "rmsnorm", "rmsnorm-scale", "4x8;size=1e-2"),
    ("rmsnorm-scale 2e-3", "rmsnorm", "rmsnorm-scale", "4x8;size=2e-3"),
    ("rmsnorm-proj 1e-1", "rmsnorm", "rmsnorm-proj", "4x8;size=0.1"),
    ("rmsnorm-proj 1e-2", "rmsnorm", "rmsnorm-proj", "4x8;size=1e-2"),
    ("overwrite (rmsnorm(x) + x)", "rmsnorm", "overwrite", "4x8"),
    ("LayerNorm, correct, C=128", "layernorm", None, "4x128"),
    ("layernorm-no-mean", "layernorm", "layernorm-no-mean", "4x8"),
    ("layernorm-unbiased, C=8", "layernorm", "layernorm-unbiased", "4x8"),
    ("layernorm-unbiased, C=128", "layernorm", "layernorm-unbiased", "4x128"),
]
MODES = ["full", "directional", "jacobian"]


def spec_args(spec):
    """The ;key=value arguments of a spec."""
    out = {}
    for part in spec.split(";")[1:]:
        k, v = part.split("=")
        out[k] = float(v)
    return out


def run_tool(op, bug, spec, mode):
    """One batch of the tool: per seed, pass and the inputs; the time a check."""
    cmd = [TOOL, "check"]
    cmd += ["--inject", bug] if bug else [op]
    # PyTorch's step and atol are absolute: the same here (the tool's
    # default is relative to the input's and the gradient's scale)
    cmd += ["--shape", spec, "--mode", mode, "--seeds", str(SEEDS), "--format", "json", "--print-inputs",
            "--step", "absolute", "--atol-scale", "absolute"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1, 3):
        sys.exit("tapegrad-gradcheck failed: %s\n%s" % (" ".join(cmd), p.stderr))
    d = json.loads(p.stdout)
    runs = d["checks"]
    per_check = d["summary"]["check_seconds"] / sum(d["summary"]["checks"].values())
    return runs, per_check


# ---- the functions in PyTorch, with the same wrong backward passes -------------


class RMSNormFn(torch.autograd.Function):
    """y = x r gamma, r = 1 / sqrt(mean x^2 + eps); the backward of
    tools/gradcheck/inject.c's bug (None: the right one)."""

    @staticmethod
    def forward(ctx, x, gamma, eps, bug, size):
        r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, gamma, r)
        ctx.eps, ctx.bug, ctx.size = eps, bug, size
        return x * r * gamma

    @staticmethod
    def backward(ctx, dy):
        x, gamma, r = ctx.saved_tensors
        bug, size, eps = ctx.bug, ctx.size, ctx.eps
        if bug == "rmsnorm-sum":
            r = torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)
        elif bug == "rmsnorm-no-eps":
            r = torch.rsqrt((x * x).mean(-1, keepdim=True))
        u, xhat = gamma * dy, x * r
        m = (u * xhat).mean(-1, keepdim=True)
        dx = r * (u - (1 + size if bug == "rmsnorm-proj" else 1) * xhat * m)
        if bug == "rmsnorm-scale":
            dx = (1 + size) * dx
        dgamma = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
        return dx, dgamma, None, None, None


class RMSNormPlusX(torch.autograd.Function):
    """The overwrite bug: f = rmsnorm(x) + x, whose backward assigns dx
    (RMSNorm's) where it should add it to the residual's dy."""

    @staticmethod
    def forward(ctx, x, gamma, eps):
        r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, gamma, r)
        return x * r * gamma + x

    @staticmethod
    def backward(ctx, dy):
        x, gamma, r = ctx.saved_tensors
        u, xhat = gamma * dy, x * r
        dx = r * (u - xhat * (u * xhat).mean(-1, keepdim=True))  # BUG: no + dy
        return dx, (dy * xhat).reshape(-1, x.shape[-1]).sum(0), None


class LayerNormFn(torch.autograd.Function):
    """y = (x - mu) r gamma + beta, r = 1 / sqrt(var + eps) (biased)."""

    @staticmethod
    def forward(ctx, x, gamma, beta, eps, bug):
        mu = x.mean(-1, keepdim=True)
        r = torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, gamma, mu, r)
        ctx.eps, ctx.bug = eps, bug
        return (x - mu) * r * gamma + beta

    @staticmethod
    def backward(ctx, dy):
        x, gamma, mu, r = ctx.saved_tensors
        C = x.shape[-1]
        if ctx.bug == "layernorm-unbiased":
            r = torch.rsqrt(((x - mu) ** 2).sum(-1, keepdim=True) / (C - 1) + ctx.eps)
        u, xhat = gamma * dy, (x - mu) * r
        m = (u * xhat).mean(-1, keepdim=True)
        mean_u = 0 if ctx.bug == "layernorm-no-mean" else u.mean(-1, keepdim=True)
        dx = r * (u - mean_u - xhat * m)
        flat = lambda t: t.reshape(-1, C).sum(0)
        return dx, flat(dy * xhat), flat(dy), None, None


def torch_function(op, bug, spec):
    a = spec_args(spec)
    if op == "rmsnorm":
        eps = a.get("eps", 1e-6)
        if bug == "overwrite":
            return lambda x, g: RMSNormPlusX.apply(x, g, eps)
        return lambda x, g: RMSNormFn.apply(x, g, eps, bug, a.get("size", 0.1))
    eps = a.get("eps", 1e-5)
    return lambda x, g, b: LayerNormFn.apply(x, g, b, eps, bug)


def tensors(values, names):
    out = []
    for n in names:
        v = values[n]
        out.append(torch.tensor(v["values"], dtype=torch.float64).reshape(v["shape"]).requires_grad_(True))
    return out


def main():
    rows = []
    for label, op, bug, spec in CASES:
        ours = {}
        per_check = {}
        inputs = None
        for mode in MODES:
            runs, t = run_tool(op, bug, spec, mode)
            ours[mode] = sum(1 for r in runs if r["result"]["verdict"] == "wrong") / len(runs)
            per_check[mode] = t
            if inputs is None:
                inputs = [(r["input_seed"], r["values"]) for r in runs]
        fn = torch_function(op, bug, spec)
        names = ["x", "gamma"] + (["beta"] if op == "layernorm" else [])
        theirs, their_time = {}, {}
        for fast in (False, True):
            failed, secs = 0, 0.0
            for seed, values in inputs:
                torch.manual_seed(seed)
                args = tensors(values, names)
                t0 = time.perf_counter()
                ok = torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=False,
                                              fast_mode=fast)
                secs += time.perf_counter() - t0
                failed += not ok
            key = "torch_fast" if fast else "torch_slow"
            theirs[key] = failed / len(inputs)
            their_time[key] = secs / len(inputs)
        row = {"case": label, "spec": spec, **{"ours_" + m: ours[m] for m in MODES}, **theirs,
               **{"us_ours_" + m: 1e6 * per_check[m] for m in MODES}, **{"us_" + k: 1e6 * v for k, v in their_time.items()}}
        rows.append(row)
        print("%-28s ours full %.2f dir %.2f jac %.2f | torch slow %.2f fast %.2f" %
              (label, ours["full"], ours["directional"], ours["jacobian"], theirs["torch_slow"], theirs["torch_fast"]),
              flush=True)

    with open(os.path.join(OUT, "vs_pytorch.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    md = ["| case | spec | ours full | ours directional | ours jacobian | torch slow | torch fast |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| %s | `%s` | %.2f | %.2f | %.2f | %.2f | %.2f |" % (r["case"], r["spec"], r["ours_full"],
                  r["ours_directional"], r["ours_jacobian"], r["torch_slow"], r["torch_fast"]))
    md += ["", "| case | ours full | ours directional | ours jacobian | torch slow | torch fast |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        md.append("| %s | %.0f us | %.0f us | %.0f us | %.0f us | %.0f us |" % (r["case"], r["us_ours_full"],
                  r["us_ours_directional"], r["us_ours_jacobian"], r["us_torch_slow"], r["us_torch_fast"]))
    with open(os.path.join(OUT, "vs_pytorch.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))

    dat = os.path.join(OUT, "vs_pytorch.dat")
    with open(dat, "w") as f:
        for i, r in enumerate(rows):
            f.write('%d "%s" %.4f %.4f %.4f %.4f %.4f\n' % (i, r["case"], r["ours_full"], r["ours_directional"],
                    r["ours_jacobian"], r["torch_slow"], r["torch_fast"]))
    term = "pngcairo size 1300,560 font 'sans,10'"
    if b"pngcairo" not in subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True).stderr + \
            subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True).stdout:
        term = "png size 1300,560"
    gp = """set terminal %s
set output '%s/vs_pytorch.png'
set title 'Fraction of %d seeds (same inputs for both) on which the check fails: float64, h 1e-6, atol 1e-5, rtol 1e-3'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set yrange [0:1.05]
set ylabel 'fails (for a bug: detection rate)'
set xtics rotate by -30 scale 0 font ',9'
set key outside right top box
set grid ytics
plot '%s' using 3:xtic(2) title 'tapegrad full' lc rgb '#1f4e9c', \\
     '' using 4 title 'tapegrad directional' lc rgb '#5fa8d3', \\
     '' using 5 title 'tapegrad jacobian' lc rgb '#0b2c5c', \\
     '' using 6 title 'torch slow' lc rgb '#b2182b', \\
     '' using 7 title 'torch fast' lc rgb '#f4a261'
""" % (term, IMG, SEEDS, dat)
    with open(os.path.join(OUT, "vs_pytorch.gp"), "w") as f:
        f.write(gp)
    subprocess.run(["gnuplot", os.path.join(OUT, "vs_pytorch.gp")], check=True)
    print("wrote %s/vs_pytorch.csv, %s/vs_pytorch.md and %s/vs_pytorch.png" % (OUT, OUT, IMG))


if __name__ == "__main__":
    main()
