#!/usr/bin/env bash
# Runs every benchmark program of a build (build/bench/bench_*), one after
# the other. `make bench` uses scripts/bench.sh instead when it exists.
# Usage: scripts/run-benches.sh BUILD_DIR [ARGS...]
set -euo pipefail
build=${1:?usage: run-benches.sh BUILD_DIR [ARGS...]}
shift
shopt -s nullglob
benches=("$build"/bench/bench_*)
if [ ${#benches[@]} -eq 0 ]; then
  echo "make bench: no benchmarks built yet (bench/*.c)" >&2
  exit 1
fi
for b in "${benches[@]}"; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" "$@"
done
