#!/usr/bin/env bash
# `make bench`: builds tapegrad in Release with native CPU tuning (its own
# build folder, build-release/ unless BENCH_BUILD says otherwise), then runs
# the benchmark, which measures this machine's limits, times every case
# (bench/vs_pytorch.c lists them, docs/DESIGN.md describes the bench) beside
# PyTorch (when /usr/bin/python3 can import torch) and OpenBLAS (when
# libopenblas is installed), prints ONE table with our performance targets
# and writes it as JSON.
#
# Usage: scripts/bench.sh [MAKE_BUILD_DIR] [BENCH_ARGS...]
#   MAKE_BUILD_DIR  the folder `make` builds in (default build/): the table
#                   needs a Release build, made in build-release/; the
#                   user-build rows (below) compare the two
#   BENCH_ARGS      passed to bench_vs_pytorch, e.g. --budget 1, --only norm,
#                   --no-torch, --contend (see bench/vs_pytorch.c); --only dist
#                   runs only the data-parallel section (below); --only llmc
#                   only llm.c's train_gpt2.c beside our GPT step (below)
# Environment: BENCH_THREADS (default 1: the thread count of ours, PyTorch's
#   and OpenBLAS's; BENCH_THREADS=2 make bench prints the same rows with 2),
#   BENCH_JSON (default out/bench/bench.json; out/bench/GROUP.json with
#   --only GROUP, and -Nt before .json with BENCH_THREADS=N > 1, so a partial
#   or a 2-thread run does not replace the full one), BENCH_BUILD (default
#   build-release, or build-release-avx2 with BENCH_ISA=avx2), BENCH_ARGS,
#   BENCH_ISA=avx2: our AVX2+FMA kernels on an AVX-512 machine (-march=native
#   -mno-avx512f, so the same tuning without AVX-512); OpenBLAS and PyTorch
#   then run with OPENBLAS_CORETYPE=Haswell, its AVX2 kernels, unless
#   OPENBLAS_CORETYPE is set.
#
# By default OpenBLAS and PyTorch run with OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset (both together), so OpenBLAS picks its own kernels
# and cache sizes (the header names the core it chose): the fair case.
#
# The data-parallel section (bench/dist.c; after the table, or alone with
# --only dist): bench_dist's steps/s of the MLP and the GPT small training
# steps with 1 and 2 processes of 1 thread each against 1 process with 2
# threads, the all-reduce's share of the time, the 1.7x target for 2
# processes on the GPT small step and whether the machine was quiet. It
# needs tapegrad::dist over MPI in the Release build (TG_MPI, ON when CMake
# finds MPI: scripts/deps.sh mpi) and is skipped with a message otherwise.
# BENCH_DIST_ARGS go to bench_dist (e.g. --samples 5, --gpt tiny); its
# text goes beside the table's, as dist.txt.
#
# The build users run (after the table, or alone with --only user):
# bench_user_build times the GPT example's training step (float32 and
# bfloat16 autocast) in MAKE_BUILD_DIR, the default build with the lifetime
# checks that `make demo` makes, and in the Release build, alternating
# three times, and prints the ratio of the medians and the page faults per
# step of each (user_build.txt and user_build.json beside the table's).
#
# llm.c (after it, or alone with --only llmc; in the full run only when
# LLMC_DIR is set): scripts/llmc_bench.sh times llm.c's train_gpt2.c, from
# the checkout LLMC_DIR (MIT-licensed third-party code the user provides;
# none of it is in this repository), beside our GPT-2 step; its text goes
# beside the table's, as llmc.txt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

make_build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then make_build=$1; shift; fi  # make's build folder
isa=${BENCH_ISA:-native}
case "$isa" in
  native) build=${BENCH_BUILD:-build-release}
          flags=(-DTG_NATIVE=ON -DCMAKE_C_FLAGS=) ;;
  avx2)   build=${BENCH_BUILD:-build-release-avx2}
          flags=(-DTG_NATIVE=OFF "-DCMAKE_C_FLAGS=-march=native -mno-avx512f") ;;
  *) echo "scripts/bench.sh: BENCH_ISA is '$isa'; expected native or avx2" >&2; exit 2 ;;
esac
threads=${BENCH_THREADS:-1}
jobs=$(nproc 2>/dev/null || echo 2)

# Which sections run: --only GROUP (here or in BENCH_ARGS) picks one;
# dist is ours, the other groups are bench_vs_pytorch's.
# shellcheck disable=SC2206  # BENCH_ARGS is a list of words
all_args=(${BENCH_ARGS:-} "$@")
only=
for ((i = 0; i < ${#all_args[@]}; i++)); do
  if [ "${all_args[i]}" = --only ]; then only=${all_args[i + 1]:-}; fi
done
run_table=1 run_dist=1 run_user=1
if [ "$only" = dist ]; then run_table=0 run_user=0
elif [ "$only" = user ]; then run_table=0 run_dist=0
elif [ -n "$only" ]; then run_dist=0 run_user=0; fi
# --only llmc: llm.c's train_gpt2.c beside our GPT step (scripts/llmc_bench.sh,
# LLMC_DIR); the full run adds it when LLMC_DIR is set
run_llmc=0
if [ "$only" = llmc ]; then run_table=0 run_llmc=1; elif [ -z "$only" ] && [ -n "${LLMC_DIR:-}" ]; then run_llmc=1; fi

# Where the table goes: scripts/perf_doc.py reads every JSON of its folder
# and writes docs/performance.md from them (make bench runs it after this).
json_name=${only:-bench}
if [ "$threads" != 1 ]; then json_name=$json_name-${threads}t; fi
json=${BENCH_JSON:-out/bench/$json_name.json}

# OpenBLAS, for its own column and because Debian's PyTorch multiplies
# matrices through libblas.so.3: without OpenBLAS that is the reference
# BLAS, ~40x slower, which would make every Linear ratio meaningless.
if [ "$run_table" = 1 ]; then scripts/deps.sh openblas; fi

targets=()
if [ "$run_table" = 1 ]; then targets+=(bench_vs_pytorch); fi
if [ "$run_dist" = 1 ]; then targets+=(bench_dist); fi
if [ "$run_llmc" = 1 ]; then targets+=(bench_vs_pytorch); fi
if [ "$run_user" = 1 ]; then targets+=(bench_user_build); fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${flags[@]}" -DBUILD_TESTING=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >/dev/null

mkdir -p "$(dirname "$json")"
if [ "$run_table" = 1 ]; then
  blas_env=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
  if [ "$isa" = avx2 ]; then blas_env=(-u OPENBLAS_L2_SIZE "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}"); fi
  env "${blas_env[@]}" \
    "$build/bench/bench_vs_pytorch" --threads "$threads" --json "$json" "${all_args[@]}" \
    | tee "${json%.json}.txt"
fi

if [ "$run_dist" = 1 ]; then
  echo
  echo "== data parallel (bench_dist): 1 and 2 processes of 1 thread vs 1 process of 2 threads"
  if grep -q '^TG_MPI:BOOL=ON$' "$build/CMakeCache.txt"; then
    # shellcheck disable=SC2086  # BENCH_DIST_ARGS is a list of words
    "$build/bench/bench_dist" ${BENCH_DIST_ARGS:-} | tee "$(dirname "$json")/dist.txt"
  else
    echo "skipped: $build was built without MPI (TG_MPI=OFF); scripts/deps.sh mpi installs Open MPI," \
      "then configure $build again with -DTG_MPI=ON" | tee "$(dirname "$json")/dist.txt"
  fi
fi

if [ "$run_user" = 1 ]; then
  echo
  echo "== the build users run: the GPT example's step (L4 C128 T64 B16), $make_build against $build"
  cmake --build "$make_build" -j "$jobs" --target bench_user_build >/dev/null
  scripts/bench_user_build.sh "$make_build" "$build" "$threads" "$(dirname "$json")/user_build.json" \
    | tee "$(dirname "$json")/user_build.txt"
fi

if [ "$run_llmc" = 1 ]; then
  echo
  BENCH_BUILD="$build" scripts/llmc_bench.sh | tee "$(dirname "$json")/llmc.txt"
fi
