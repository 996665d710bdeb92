#!/usr/bin/env bash
# scripts/llmc_bench.sh: llm.c's train_gpt2.c beside tapegrad's GPT-2
# training step (issue 13's "faster than llm.c" targets), at the issue's two
# sizes: tiny (L=4, H=4, C=128) and small (L=6, H=6, C=384), both with
# T=64, B=4, vocabulary 128. `scripts/bench.sh --only llmc` runs it (and the
# full `make bench` does when LLMC_DIR is set).
#
# llm.c (https://github.com/karpathy/llm.c, Andrej Karpathy) is third-party
# code under the MIT license. The user provides it: LLMC_DIR is a checkout
# of it. None of its code is in this repository, and this script changes
# none of it; without LLMC_DIR it says so and skips. Ours are this script
# and bench/llmc/llmc_step.c, a driver that includes $LLMC_DIR/train_gpt2.c
# unmodified (with TESTING defined, llm.c's switch that leaves out its main),
# writes a GPT-2 checkpoint and token files in llm.c's formats (the
# fortunes' bytes below 128 as tokens) and times llm.c's step as its main
# does: next batch, forward, zero-grad, backward, AdamW update. It is
# compiled with llm.c's Makefile flags for train_gpt2 (-Ofast -march=native
# -fopenmp -DOMP, -lm -lgomp) and run with OMP_NUM_THREADS=1 and 2.
#
# tapegrad's side is the bench's own GPT rows: build-release/bench/
# bench_vs_pytorch --only gpt --no-torch --threads 1 (zero-grad, forward,
# cross-entropy, backward, AdamW; bench/vs_pytorch.c gpt_step), which
# `scripts/bench.sh --only llmc` builds first. The two alternate, LLMC_ROUNDS
# times, and the table gives the medians over the rounds. With 1 thread
# both sides count the process's CPU time per step (as the bench's 1-thread
# rows do: robust on a shared machine), with 2 threads wall-clock time.
#
# Usage: LLMC_DIR=/path/to/llm.c scripts/bench.sh --only llmc
#        LLMC_DIR=/path/to/llm.c scripts/llmc_bench.sh   (needs the Release build)
# Environment: LLMC_DIR (required; absolute, or relative to the repository's
#   root, where this script and scripts/bench.sh run), LLMC_ROUNDS (default 3), LLMC_STEPS
#   (timed llm.c steps per run, default 10, after 2 warm-up steps),
#   LLMC_THREADS (llm.c's thread counts, default "1 2"), LLMC_CONFIGS
#   (default "tiny small"), LLMC_TEXT (the text files, default the
#   fortunes: /usr/share/games/fortunes, scripts/deps.sh installs them),
#   LLMC_BUDGET (bench_vs_pytorch --budget, default 1), LLMC_OUT (default
#   out/bench/llmc: the binary, the checkpoints, the token files, every
#   run's output), BENCH_BUILD (default build-release), CC (default gcc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

llmc=${LLMC_DIR:-}
if [ -z "$llmc" ] || [ ! -r "$llmc/train_gpt2.c" ]; then
  where=${llmc:-not set}
  echo "skipped: llm.c not found: set LLMC_DIR to a checkout of https://github.com/karpathy/llm.c" \
    "(MIT-licensed third-party code, not part of tapegrad; LLMC_DIR: $where)"
  exit 0
fi
build=${BENCH_BUILD:-build-release}
bench="$build/bench/bench_vs_pytorch"
if [ ! -x "$bench" ]; then
  echo "scripts/llmc_bench.sh: $bench is missing: run scripts/bench.sh --only llmc (it builds it)" >&2
  exit 2
fi
out=${LLMC_OUT:-out/bench/llmc}
rounds=${LLMC_ROUNDS:-3} steps=${LLMC_STEPS:-10} budget=${LLMC_BUDGET:-1}
read -r -a threads_list <<<"${LLMC_THREADS:-1 2}"
read -r -a configs <<<"${LLMC_CONFIGS:-tiny small}"
if [ -n "${LLMC_TEXT:-}" ]; then
  read -r -a text <<<"$LLMC_TEXT"
else
  # the fortune files: no dot in the name (not the .dat indexes nor the .u8 links)
  mapfile -t text < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' 2>/dev/null | sort)
  if [ ${#text[@]} -eq 0 ]; then
    echo "scripts/llmc_bench.sh: no fortunes in /usr/share/games/fortunes (scripts/deps.sh installs them)," \
      "or set LLMC_TEXT to text files" >&2
    exit 2
  fi
fi
mkdir -p "$out"

# llm.c's Makefile flags for train_gpt2 with gcc and OpenMP
cc=${CC:-gcc}
"$cc" -Ofast -Wno-unused-result -march=native -fopenmp -DOMP -I"$llmc" bench/llmc/llmc_step.c -lm -lgomp \
  -o "$out/llmc_step"

shape() { # L H C of a configuration
  case "$1" in
    tiny) echo "4 4 128" ;;
    small) echo "6 6 384" ;;
    *) echo "scripts/llmc_bench.sh: LLMC_CONFIGS holds '$1'; expected tiny or small" >&2; exit 2 ;;
  esac
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" "$2"; } # a field of llmc_step's result line
ours_s() { # a case's seconds per step from bench_vs_pytorch's JSON: name prefix, key, file
  sed -n "s/.*\"name\": \"$1[^\"]*\".*\"$2\": \([^,]*\),.*/\1/p" "$3" | head -1
}
median() { # of the numbers on stdin
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
    else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

before=$(uptime)
commit=$(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
for ((r = 1; r <= rounds; r++)); do
  for cfg in "${configs[@]}"; do
    read -r L H C <<<"$(shape "$cfg")"
    for th in "${threads_list[@]}"; do
      echo "round $r/$rounds: llm.c $cfg, $th thread(s)" >&2
      OMP_NUM_THREADS=$th "$out/llmc_step" --dir "$out" --layers "$L" --heads "$H" --channels "$C" --context 64 \
        --batch 4 --vocab 128 --steps "$steps" --warmup 2 "${text[@]}" >"$out/llmc_${cfg}_${th}t_r$r.txt"
    done
  done
  echo "round $r/$rounds: tapegrad (bench_vs_pytorch --only gpt --no-torch --threads 1)" >&2
  "$bench" --only gpt --no-torch --no-blas --threads 1 --budget "$budget" --json "$out/tapegrad_r$r.json" \
    >"$out/tapegrad_r$r.txt" 2>&1
done
after=$(uptime)

echo "== llm.c train_gpt2.c vs tapegrad: GPT-2 step (zero-grad, forward, backward, AdamW), vocabulary 128, T=64, B=4"
echo "llm.c: $llmc ($commit), $cc -Ofast -march=native -fopenmp (bench/llmc/llmc_step.c; $steps steps after 2" \
  "warm-up, median); tapegrad: $bench --only gpt --no-torch --threads 1 --budget $budget"
echo "medians of $rounds alternating rounds; 1 thread: process CPU time per step (wall clock beside it)," \
  "2 threads: wall clock; outputs in $out/"
load0=${before##*load average: } load1=${after##*load average: }
echo "machine: $(nproc) CPUs; load average before: $load0; after: $load1$(awk -v l="${load0%%,*}" 'BEGIN {
  if (l >= 1) printf " -> NOT QUIET: the wall-clock figures (2 threads above all) are unreliable; the 1-thread CPU-time ratios hold" }')"
printf '%-6s %8s %14s %15s %15s %13s %10s %10s  %s\n' config params "llm.c 1T CPU" "llm.c 1T wall" \
  "llm.c 2T wall" "tapegrad 1T" "vs llm.c" "vs its 2T" "target (1 thread each)"
llmc_ms() { # llm.c's median ms over the rounds: config, threads, field
  for ((r = 1; r <= rounds; r++)); do field "$3" "$out/llmc_${1}_${2}t_r$r.txt"; done | median
}
tapegrad_s() { # tapegrad's median seconds over the rounds: case name prefix, JSON key
  for ((r = 1; r <= rounds; r++)); do ours_s "$1" "$2" "$out/tapegrad_r$r.json"; done | median
}
for cfg in "${configs[@]}"; do
  params=$(field params "$out/llmc_${cfg}_${threads_list[0]}t_r1.txt")
  l1cpu=nan l1wall=nan l2wall=nan
  if [[ " ${threads_list[*]} " == *" 1 "* ]]; then l1cpu=$(llmc_ms "$cfg" 1 cpu_ms) l1wall=$(llmc_ms "$cfg" 1 wall_ms); fi
  if [[ " ${threads_list[*]} " == *" 2 "* ]]; then l2wall=$(llmc_ms "$cfg" 2 wall_ms); fi
  t1=$(tapegrad_s "GPT-2 step $cfg " ours_s)
  goal=$([ "$cfg" = tiny ] && echo 4 || echo 3.5)
  awk -v cfg="$cfg" -v p="$params" -v a="$l1cpu" -v w="$l1wall" -v b="$l2wall" -v t="$t1" -v g="$goal" '
    function known(x) { return x != "nan" && x != "" && x != "null" }
    function ms(x, scale) { return known(x) ? sprintf("%.2f ms", x * scale) : "-" }
    BEGIN {
      x = known(a) && known(t) && t > 0 ? a / (1000 * t) : 0
      verdict = x == 0 ? "no figure" : x >= g ? sprintf("met (%.2fx)", x) \
                                           : sprintf("MISSED by %.0f%% (%.2fx)", 100 * (1 - x / g), x)
      y = known(b) && known(t) && t > 0 ? sprintf("%.2fx", b / (1000 * t)) : "-"
      printf "%-6s %6.2f M %14s %15s %15s %13s %9.2fx %10s  >=%sx: %s\n", cfg, p / 1e6, ms(a, 1), ms(w, 1),
        ms(b, 1), ms(t, 1000), x, y, g, verdict
    }'
done
