#!/usr/bin/env python3
"""Writes docs/performance.md from the benchmark's results, so that no figure
in it is typed by hand.

Usage: scripts/perf_doc.py [--bench DIR] [--out FILE]
  DIR   what scripts/bench.sh wrote (default out/bench): every *.json there.
        A table run (bench_vs_pytorch --json: bench.json for `make bench`,
        GROUP.json for `--only GROUP`, -2t before .json with 2 threads) and
        user_build.json (the default build against Release, `--only user`);
        the text beside a table run (same name, .txt) gives the per-op
        profiles of the GPT steps.
  FILE  default docs/performance.md

The prose is fixed text about what the benchmark measures; every number
comes from the JSON (or, for the per-op profiles, the text the benchmark
printed). Where several runs measured the same row, the summary takes the
newest; each run's own tables follow, with the command that produced it.
Exit status 1 when DIR holds no result."""
import argparse
import glob
import json
import math
import os
import re
import sys

GROUPS = ("norm", "linear", "scaling", "mlp", "attention", "gpt", "generate", "tiny", "lowp")


def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def fmt_time(s):
    if not num(s):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e9:.0f} ns"


def fmt_ratio(v):
    return f"{v:.2f}x" if num(v) else "-"


def fmt_measured(v, unit):
    if not num(v):
        return "-"
    if unit == "%":  # the bench gives percentages (70 for 70%)
        return f"{v:.0f}%"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.3g} {unit}".strip()


def load(bench):
    """(table runs, user-build result or None), from every JSON of bench."""
    runs, user = [], None
    for path in sorted(glob.glob(os.path.join(bench, "*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"perf_doc.py: cannot read {path}: {e}")
        if not isinstance(d, dict):
            continue
        d["_file"] = os.path.basename(path)
        if "cases" in d and "targets" in d:
            stem = d["_file"][: -len(".json")]
            d["_txt"] = os.path.join(bench, stem + ".txt")
            if "only" not in d:  # a result older than the field: its name says the group
                base = stem.rsplit("-", 1)[0] if stem.endswith("t") and "-" in stem else stem
                d["only"] = base if base in GROUPS or base.startswith("lowp-") else None
            runs.append(d)
        elif "rows" in d and "release_build" in d:
            user = d
    runs.sort(key=lambda r: (r.get("date", ""), r["_file"]))
    return runs, user


def command(run):
    env = f"BENCH_THREADS={run['threads']} " if run.get("threads", 1) != 1 else ""
    if not run.get("only") and not run.get("contend"):
        return f"{env}make bench"
    args = (f" --only {run['only']}" if run.get("only") else "") + (" --contend" if run.get("contend") else "")
    return f"{env}bash scripts/bench.sh{args}"


def quiet(run):
    load0 = (run.get("loadavg") or [None])[0]
    others = run.get("others_cpus_run")
    return num(load0) and load0 < 1.5 and num(others) and others <= 0.25


def run_line(run):
    """One sentence: when, where, how many threads, how quiet."""
    others = run.get("others_cpus_run")
    state = "quiet" if quiet(run) else "**not quiet**: the wall-clock figures (2 threads, scaling) are unreliable"
    clock = "process CPU time" if run.get("clock") == "process_cpu" else "wall time"
    threads = run.get("threads", 1)
    return (f"{run['_file']}, {threads} thread{'' if threads == 1 else 's'}, "
            f"{clock}; load average {run['loadavg'][0]:.1f}, other jobs "
            f"{others if num(others) else float('nan'):.2f} CPUs on average while ours ran: {state}")


def machine(runs):
    r = runs[-1]
    conv = next((x["conversions_isa"] for x in reversed(runs) if x.get("conversions_isa")), None)
    l1 = r.get("limits_1T", {})
    nt = next((k for k in r if k.startswith("limits_") and k != "limits_1T"), None)
    ln = r.get(nt, {}) if nt else {}

    def lim(d, k, f="{:.1f}"):
        return f.format(d[k]) if num(d.get(k)) else "?"

    lines = [
        f"- CPU: {r.get('cpu', '?')}; vector instructions used: {l1.get('isa', '?')} (the FMA peak and the f32 "
        f"GEMM kernel `{r.get('gemm_kernel', '?')}`), bfloat16 GEMM kernel `{r.get('bf16_gemm_kernel', '?')}`"
        + (f", 16-bit conversions {conv}" if conv else "") + ".",
        f"- Limits with 1 thread: DRAM copy {lim(l1, 'copy_gbs')} GB/s, triad {lim(l1, 'triad_gbs')} GB/s; "
        f"FMA peak f32 {lim(l1, 'fma_f32_gflops')} GFLOP/s, f64 {lim(l1, 'fma_f64_gflops')}"
        + (f" (theoretical at {l1['clock_ghz']:.2f} GHz: {l1['fma_f32_theory_gflops']:.1f} and "
           f"{l1['fma_f64_theory_gflops']:.1f})" if num(l1.get("clock_ghz")) else "") + ".",
    ]
    if ln:
        lines.append(f"- Limits with {nt[len('limits_'):-1]} threads: DRAM copy {lim(ln, 'copy_gbs')} GB/s, triad "
                     f"{lim(ln, 'triad_gbs')} GB/s; FMA peak f32 {lim(ln, 'fma_f32_gflops')} GFLOP/s.")
    lines.append(f"- PyTorch {r.get('torch') or 'absent'}; OpenBLAS core {r.get('openblas_core') or '?'}"
                 + (" (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset: its own choice)"
                    if r.get("openblas_env_unset") else " (**OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE set**)") + ".")
    return "\n".join(lines)


def newest(runs, threads=1):
    """name -> (case, run) and (what, case) -> (target, run), the newest run winning."""
    cases, targets = {}, {}
    for r in runs:
        if r.get("threads", 1) != threads or r.get("contend"):
            continue
        for c in r["cases"]:
            cases[c["name"]] = (c, r)
        for t in r["targets"]:
            targets[(t["what"], t["case"])] = (t, r)
    return cases, targets


def find_target(targets, *words):
    hits = [v for (what, _), v in targets.items() if all(w in what for w in words)]
    return hits[-1] if hits else None


def met_word(t):
    return {True: "met", False: "**missed**", None: "not measured"}[t.get("met")]


def goal(t):
    g = t.get("goal")
    if not num(g):
        return "-"
    return f"{t['direction']} " + fmt_measured(g, t.get("unit", ""))


def summary(runs, user):
    cases, targets = newest(runs, 1)
    rows = []

    def from_target(label, group, *words):
        hit = find_target(targets, *words)
        if not hit:
            rows.append((label, "not measured", "-", "-", f"`bash scripts/bench.sh --only {group}`"))
            return
        t, r = hit
        rows.append((label, fmt_measured(t.get("measured"), t.get("unit", "")), goal(t), met_word(t),
                     f"`{command(r)}`"))

    if user:
        for u in user["rows"]:
            met = "met" if u["ratio"] <= 1.1 else "**missed**"
            rows.append((f"GPT example step ({u['dtype']}), `{user['default_build']}` (make demo's build) / "
                         f"`{user['release_build']}` (Release)", f"{u['ratio']:.2f}x ({u['default_ms']:.1f} / "
                         f"{u['release_ms']:.1f} ms)", "<= 1.10x", met, "`bash scripts/bench.sh --only user`"))
    else:
        rows.append(("GPT example step, make demo's build / Release", "not measured", "<= 1.10x", "-",
                     "`bash scripts/bench.sh --only user`"))
    from_target("bf16 Linear 4096x768x3072 / f32, GFLOP/s (same run)", "lowp", "Linear bf16", "vs f32")
    from_target("bf16 Linear 4096x768x3072 / PyTorch's bf16 F.linear", "lowp", "Linear bf16", "PyTorch")
    from_target("MLP step, bf16 mixed precision / f32 (same run)", "lowp", "MLP", "mixed")
    from_target("GPT-2 small step, bf16 mixed precision / f32 (same run)", "lowp", "GPT-2", "mixed")
    from_target("GPT-2 tiny step / PyTorch's", "gpt", "GPT-2 step tiny vs PyTorch")
    from_target("GPT-2 small step / PyTorch's", "gpt", "GPT-2 step small vs PyTorch")
    # the AdamW row of the gpt group (the lowp group's f32 and bf16 rows of
    # the same model have no fraction of a limit)
    small = next((v for k, v in cases.items()
                  if k.startswith("GPT-2 step small L") and num(v[0].get("fraction_of_limit"))), None)
    if find_target(targets, "GPT-2 step small GEMM rate"):
        from_target("GPT-2 small step's GEMM rate, % of the FMA peak (1 thread)", "gpt", "GPT-2 step small GEMM rate")
    elif small:
        c, r = small
        rows.append(("GPT-2 small step's GEMM rate, % of the FMA peak (1 thread)",
                     f"{100 * c['fraction_of_limit']:.0f}% of {c.get('limit') or 'the peak'}", "-", "-",
                     f"`{command(r)}`"))
    else:
        rows.append(("GPT-2 small step's GEMM rate, % of the FMA peak", "not measured", "-", "-",
                     "`bash scripts/bench.sh --only gpt`"))
    from_target("GPT-2 small step's GEMM rate / the big Linear's", "gpt", "GPT-2 step small GFLOP/s")
    scaling = [(t, r) for (what, _), (t, r) in targets.items() if "threads vs 1 thread" in what]
    for t, r in scaling:
        c = cases.get(t["case"], ({}, r))[0]
        note = f" (others {c['others_cpus']:.1f} CPUs)" if num(c.get("others_cpus")) else ""
        cpu = re.search(r"-> ([0-9.]+)x on free cores", c.get("note") or "")
        if cpu:  # what the CPU times allow on free cores, robust when the machine is busy
            note += f"; {cpu.group(1)}x by CPU time on free cores"
        rows.append((f"{t['what']}, wall clock", fmt_measured(t.get("measured"), t.get("unit", "")) + note, goal(t),
                     met_word(t), f"`{command(r)}`"))
    if not scaling:
        rows.append(("2 threads / 1 thread, wall clock", "not measured", ">= 1.75x", "-",
                     "`bash scripts/bench.sh --only scaling`"))
    out = ["| what | measured | target | | run |", "|---|---:|---:|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    return "\n".join(out)


def cases_table(run):
    out = ["| case | ours | rate | of limit | PyTorch | speedup | OpenBLAS | vs BLAS |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for c in run["cases"]:
        rate = f"{c['rate']:.4g} {c['unit']}" if num(c.get("rate")) else "-"
        frac = c.get("fraction_of_limit")
        if not num(frac):
            lim = "-"
        elif c["group"] == "memory":
            lim = f"{frac:.2f}x {c.get('limit', '')}".strip()
        else:
            lim = f"{100 * frac:.0f}% {c.get('limit', '')}".strip()
        busy = " !" if num(c.get("others_cpus")) and c["others_cpus"] > 0.5 else ""
        out.append(f"| {c['name']}{busy} | {fmt_time(c.get('ours_s'))} | {rate} | {lim} | "
                   f"{fmt_time(c.get('torch_s'))} | {fmt_ratio(c.get('speedup_vs_torch'))} | "
                   f"{fmt_time(c.get('openblas_s'))} | {fmt_ratio(c.get('ratio_vs_openblas'))} |")
    notes = [f"- {c['name']}: {c['note']}" for c in run["cases"] if c.get("note")]
    return "\n".join(out) + ("\n\n" + "\n".join(notes) if notes else "")


def targets_table(run):
    out = ["| target | case | measured | goal | |", "|---|---|---:|---:|---|"]
    for t in run["targets"]:
        out.append(f"| {t['what']} | {t['case']} | {fmt_measured(t.get('measured'), t.get('unit', ''))} | "
                   f"{goal(t)} | {met_word(t)} |")
    return "\n".join(out)


def profiles(text_path):
    """The per-op profile blocks the benchmark printed, verbatim."""
    if not os.path.exists(text_path):
        return []
    blocks, keep = [], False
    for line in open(text_path).read().splitlines():
        if line.startswith("where the GPT-2 step"):
            keep = True
            blocks.append([line])
        elif keep:
            blocks[-1].append(line)
            keep = not line.startswith("total")
    return ["```\n" + "\n".join(b) + "\n```" for b in blocks]


def user_table(ub):
    out = [f"| dtype | `{ub['default_build']}` ms/step | faults/step | `{ub['release_build']}` ms/step | "
           "faults/step | ratio | target |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in ub["rows"]:
        out.append(f"| {r['dtype']} | {r['default_ms']:.1f} | {r['default_faults_per_step']:.1f} | "
                   f"{r['release_ms']:.1f} | {r['release_faults_per_step']:.1f} | {r['ratio']:.2f}x | "
                   f"<= 1.10x: {'met' if r['ratio'] <= 1.1 else '**missed**'} |")
    return "\n".join(out)


INTRO = """# Performance

This page is written by `scripts/perf_doc.py` from the results
`scripts/bench.sh` left in `out/bench/` (`make bench` runs both; `make
perf-doc` only the script): every figure is a measurement of the run it
names, on the machine below. Compare ratios measured in one run (ours
against PyTorch, bfloat16 against float32, 2 threads against 1), not
absolute times across machines.

`make bench` builds a Release build with `-march=native` in
`build-release/` and runs `bench_vs_pytorch`. It first measures the
machine's limits (STREAM-like copy and triad bandwidth on 256 MiB arrays,
the f32/f64 FMA peak, with 1 and 2 threads), then times each case and runs
PyTorch on the same shapes right after it (`bench/torch_bench.py`, when
`/usr/bin/python3` can import torch, with the same thread count) and
OpenBLAS `sgemm` beside the Linear cases (loaded with `dlopen`, never a
dependency of the library). It prints one table with the project's speed
targets, met or missed by how much, and writes it as JSON.
"""

READING = """## How to read it

- **Times** are medians of samples taken after a warm-up (each sample a
  loop long enough to time well), the same algorithm on both sides. With
  one thread the clock is the process's CPU time
  (`CLOCK_PROCESS_CPUTIME_ID`, `time.process_time` in Python): on a
  machine shared with other jobs, time spent descheduled does not count,
  so the ratios hold up. Wall time is used with more than one thread and
  for the scaling rows, which need two idle cores: each prints the CPUs
  other jobs took while it ran, and rows where they took more than half a
  CPU are marked `!`.
- **Threads**: `BENCH_THREADS=N` sets ours, PyTorch's
  (`torch.set_num_threads`) and OpenBLAS's (`OPENBLAS_NUM_THREADS`, also
  inside PyTorch). Before each of our timings every thread pool is
  settled (under 5% of a CPU for 20 ms, `bench/common/quiet.c`), since
  spinning pools would take a core from the measurement that follows.
  With more than one thread each PyTorch case runs with OpenMP's default
  wait policy and with `OMP_WAIT_POLICY=PASSIVE`, and the faster counts.
- **Scaling rows** time the big Linear, the f32 4096x768 norms and the
  GPT-2 small step with 1 and with 2 threads, alternating, in wall time,
  and give beside them the CPU time of both (what the split allows on
  free cores) and the machine's own STREAM and FMA scaling.
- **Norm rows** time `y = norm(x)` and the backward from a fixed `dy`; GB/s
  counts the bytes that must move (x read twice, y written, dy read, dx
  written: 5 N C elements), and "of limit" divides by the measured DRAM
  bandwidth. A 4096x768 f32 case is of the order of the last-level cache,
  so a row can exceed 100%. PyTorch's RMSNorm is the composed
  `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w`, its
  LayerNorm the native `F.layer_norm`.
- **Linear rows** count 6 M N K flops (forward, dx, dW); OpenBLAS runs the
  same three products. OpenBLAS and PyTorch run with `OPENBLAS_CORETYPE`
  and `OPENBLAS_L2_SIZE` unset, so OpenBLAS picks its own kernels and cache
  sizes. A bfloat16 Linear's limit is twice the f32 FMA peak where the CPU
  has AVX-512 BF16 (VDPBF16PS).
- **MLP and GPT rows** are whole training steps: zero-grad, forward, loss,
  backward, optimizer step, the same model, loss and optimizer in PyTorch
  (the GPT-2 model is `scripts/gpt_torch.py`'s, the one the agreement test
  checks). A GPT row's rate in GFLOP/s counts its GEMMs only. Mixed
  precision rows run under autocast (`torch.autocast` in PyTorch).
- **Peak memory** is the step's arena high-water mark plus the persistent
  parameters, gradients and optimizer state, against the sum of those and
  the bytes the tape saved for backward ("needed"; it counts each Linear's
  weight, kept by pointer). PyTorch's is the RSS high-water mark of one
  step in a fresh process above its RSS before the model was made. How
  backward keeps the peak low (each intermediate's gradient released once
  used, each op's scratch rewound): [DESIGN.md](DESIGN.md), "Backward's
  memory"; how the benchmark is organized: the same, "How the benchmark
  is organized".
- **Generation** (`--only generate`) times `tg_gpt_generate` on the tiny
  GPT-2 at context 256, with the KV cache and with a forward over the
  whole window per token; **checkpointed blocks** time the GPT-2 small
  step with each block under `tg_checkpoint`, its arena peak and time
  against the plain step's ([activation-checkpointing.md](activation-checkpointing.md)).
- **PyTorch's allocator**: out of the box, glibc gives PyTorch's big freed
  blocks back to the kernel and every call faults in fresh pages; the
  benchmark runs PyTorch with `MALLOC_MMAP_THRESHOLD_` and
  `MALLOC_TRIM_THRESHOLD_` raised so it reuses warm memory as our arena
  does (the stricter comparison for us); `--torch-malloc default` runs it
  out of the box.
- **The build users run** (`--only user`): `make demo` and `make test`
  build `build/` (RelWithDebInfo, with the lifetime checks of
  `TG_CHECKED`: each step's arena memory sits out one more step).
  `bench_user_build` times the GPT example's training step (LLaMA L4 C128
  T64, batch 16, clipping, AdamW; float32 and bfloat16 autocast) in that
  build and in Release, alternating, and counts the page faults per step
  after warm-up (flat: the arena keeps its memory mapped).
- **Determinism**: results are bitwise the same with any thread count
  (`tests/test_determinism.c`); reductions split by the shape, never by
  the thread count.
"""

REPRODUCE = """## Running it, or parts of it

```sh
make bench                                 # everything, 1 thread; then this page
BENCH_THREADS=2 make bench                 # everything with 2 threads (ours, PyTorch's, OpenBLAS's)
bash scripts/bench.sh --only gpt           # one group: norm, linear, scaling, mlp, attention, gpt, generate, tiny, lowp, user, dist
bash scripts/bench.sh --contend --no-torch # 1 vs 2 threads of ours with one CPU taken by a spinner
BENCH_ISA=avx2 make bench                  # our AVX2 kernels (and OpenBLAS's) on an AVX-512 machine
bash scripts/bench.sh --no-torch --budget 1   # without PyTorch, 1 s per timed side
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/bench_gemm   # the GEMM alone vs OpenBLAS
make perf-doc                              # this page again, from out/bench/*.json
```

A group run writes `out/bench/GROUP.json` (and `GROUP-2t.json` with 2
threads), a full run `out/bench/bench.json`, so a partial run never
replaces the full one; this page takes each row from the newest run that
has it.

- **`--contend`** keeps one CPU busy with a spinning process and times
  every row of ours with 1 and with 2 threads, alternating; the target is
  that 2 threads are never more than 10% slower than 1 when a core is
  taken. Every parallel loop hands out its work through one task pool
  (`tensor/parallel.c`) in which the caller never waits for a helper
  thread that has not started, so a helper that lost its core costs
  little; the GEMM's row chunks shrink as they go (`gemm_tasks`), so no
  thread sits idle through a last big chunk.
- **The AVX2 path**: `BENCH_ISA=avx2 make bench` builds with
  `-march=native -mno-avx512f` (`build-release-avx2/`) and runs OpenBLAS
  on its AVX2 (Haswell) kernels.
- **Data parallel** (`--only dist`, in the full run when MPI is built):
  `bench_dist` times the MLP and GPT small steps with 1 and 2 processes of
  1 thread against 1 process with 2 threads ([distributed.md](distributed.md)).
- **llm.c**: `LLMC_DIR=/path/to/llm.c bash scripts/bench.sh --only llmc`
  runs llm.c's `train_gpt2.c` (MIT-licensed third-party code you check
  out yourself; none of it is in this repository) beside our GPT-2 step,
  alternating, compiled with its Makefile's flags.
- **Default thread count**: a program that does not call `tg_set_threads`
  gets `tg_default_threads()`: `TG_THREADS=N` when set, else the CPUs the
  process may use (its affinity mask and cgroup CPU quota).
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="out/bench")
    ap.add_argument("--out", default="docs/performance.md")
    a = ap.parse_args()
    runs, user = load(a.bench)
    if not runs and not user:
        sys.exit(f"perf_doc.py: no benchmark results in {a.bench}/*.json: run `make bench` "
                 "(or `bash scripts/bench.sh --only GROUP`) first")
    parts = [INTRO]
    if runs:
        parts.append("## The machine\n\n" + machine(runs) + "\n")
    parts.append("## Summary\n\nThe ratios the project's speed targets are about, each from the newest run "
                 "that measured it (1 thread unless the row says otherwise).\n\n" + summary(runs, user) + "\n")
    if not all(quiet(r) for r in runs):
        parts.append("Some runs were made on a busy machine (below, \"not quiet\"): their 1-thread ratios use CPU "
                     "time and hold up; their wall-clock rows do not.\n")
    parts.append(READING)
    parts.append("## The runs\n")
    if user:
        parts.append(f"### `bash scripts/bench.sh --only user`\n\nuser_build.json, the build users run against "
                     f"Release, {user.get('threads', 1)} thread(s), the medians of alternating runs:\n\n"
                     f"{user_table(user)}\n")
    for r in runs:
        parts.append(f"### `{command(r)}`\n\n{run_line(r)}.\n\n{targets_table(r)}\n\n{cases_table(r)}\n")
        prof = profiles(r["_txt"])
        if prof:
            parts.append("Where each GPT-2 step's time goes: the per-op profile (`tg_profile_enable`, "
                         "`include/tapegrad/tensor.h`) of 10 steps at this run's thread count, forward and "
                         "backward milliseconds per step by record, and the time without a record after the "
                         "backward (the optimizer).\n\n" + "\n\n".join(prof) + "\n")
    parts.append(REPRODUCE)
    with open(a.out, "w") as f:
        f.write("\n".join(parts))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
