#!/usr/bin/env bash
# scripts/perf_doc.py on the results in tests/fixtures/perf/: a full run
# (bench.json, the newest, of one group here), a gpt run (gpt.json) and a
# newer 2-thread twin (gpt-2t.json), a lowp run older than the full one and
# of before the JSON named its group (lowp.json), and the user-build rows
# (user_build.json). The page must take each
# summary row from the newest 1-thread run that has it, give each run's
# command, state the CPU's instruction sets and the figures of the JSON,
# quote the profile, never print a NaN; and with no result it must refuse.
# Usage: perf_doc.sh  (from anywhere; needs python3)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# has TEXT: the page holds TEXT verbatim (one line of it)
has() { grep -qF -- "$1" "$tmp/perf.md" || fail "the page lacks: $1"; }

python3 "$src/scripts/perf_doc.py" --bench "$src/tests/fixtures/perf" --out "$tmp/perf.md" > "$tmp/log"
grep -q "^wrote $tmp/perf.md$" "$tmp/log" || fail "no 'wrote' line: $(cat "$tmp/log")"

# The summary: the speed issue's ratios, each with its target and its run.
has '| GPT example step (f32), `build` (make demo'"'"'s build) / `build-release` (Release) | 1.04x (25.0 / 24.0 ms) | <= 1.10x | met |'
has '| GPT example step (bf16), `build` (make demo'"'"'s build) / `build-release` (Release) | 1.20x (30.0 / 25.0 ms) | <= 1.10x | **missed** |'
has '| bf16 Linear 4096x768x3072 / f32, GFLOP/s (same run) | 2.02x | >= 1.70x | met | `bash scripts/bench.sh --only lowp` |'
has '| bf16 Linear 4096x768x3072 / PyTorch'"'"'s bf16 F.linear | 1.07x | >= 1.10x | **missed** |'
# bench.json (2026-12-08) is newer than lowp.json (1.13x), whose name sorts after it
has '| MLP step, bf16 mixed precision / f32 (same run) | 1.45x | >= 1.40x | met | `make bench` |'
has '| GPT-2 small step, bf16 mixed precision / f32 (same run) | not measured | - | - | `bash scripts/bench.sh --only lowp` |'
# gpt-2t.json (3.25x) is newer but has 2 threads
has '| GPT-2 tiny step / PyTorch'"'"'s | 1.89x | >= 1.80x | met | `bash scripts/bench.sh --only gpt` |'
has '| GPT-2 small step'"'"'s GEMM rate, % of the FMA peak (1 thread) | 60% of FMA f32 |'
has '| GPT-2 step small 2 threads vs 1 thread, wall clock | 0.89x (others 1.5 CPUs); 1.82x by CPU time on free cores | >= 1.70x | **missed** |'
sed -n '/^## Summary/,/^## How to read it/p' "$tmp/perf.md" > "$tmp/summary"
if grep -q "1.13x\|3.25x" "$tmp/summary"; then fail "the summary took an older or a 2-thread run's figure"; fi

# Each run, under the command that made it; the older ones stay listed.
for cmd in 'make bench' 'bash scripts/bench.sh --only gpt' 'BENCH_THREADS=2 bash scripts/bench.sh --only gpt' \
           'bash scripts/bench.sh --only lowp' 'bash scripts/bench.sh --only user'; do
  grep -qxF "### \`$cmd\`" "$tmp/perf.md" || fail "no section for the run of: $cmd"
done
has '| MLP step bf16 mixed vs f32 (same run) | MLP step 784-256-256-10 b64 bf16 mixed | 1.13x | >= 1.40x | **missed** |'
has 'gpt.json, 1 thread, process CPU time; load average 0.3, other jobs 0.05 CPUs on average while ours ran: quiet.'

# The machine: the CPU's instruction sets and limits, from the JSON.
has '- CPU: AMD EPYC; vector instructions used: avx512 (the FMA peak and the f32 GEMM kernel `avx512`), bfloat16 GEMM kernel `avx512bf16`, 16-bit conversions f16c+avx512bf16.'
has 'FMA peak f32 214.7 GFLOP/s'
# The profile, verbatim, and the commands to make the page again.
has 'where the GPT-2 step tiny'"'"'s time goes (tg_profile, 10 steps):'
has 'make perf-doc                              # this page again, from out/bench/*.json'
if grep -qw "nan\|NaN\|None\|null" "$tmp/perf.md"; then fail "the page prints a missing value: $(grep -wn 'nan\|NaN\|None\|null' "$tmp/perf.md" | head -3)"; fi

# No result: a refusal naming the folder, and no page.
mkdir "$tmp/empty"
if python3 "$src/scripts/perf_doc.py" --bench "$tmp/empty" --out "$tmp/none.md" 2> "$tmp/err"; then
  fail "perf_doc.py wrote a page without results"
fi
grep -q "no benchmark results in $tmp/empty" "$tmp/err" || fail "the refusal does not name the folder: $(cat "$tmp/err")"
[ ! -e "$tmp/none.md" ] || fail "a page was written without results"
echo "perf_doc: the page from tests/fixtures/perf has the summary, the runs, the machine and the profile"
