#!/usr/bin/env bash
# Runs every test executable of a build under valgrind: any error or any
# definitely/indirectly lost block fails. Check runs in-process (CK_FORK=no)
# so valgrind sees the tests themselves. Tests run MEMCHECK_JOBS at a time
# (default: nproc); TG_UNDER_VALGRIND=1 is set so a test may shrink its
# heaviest sweeps (valgrind runs code ~30x slower).
# Usage: scripts/memcheck.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: memcheck.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${MEMCHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}

shopt -s nullglob
tests=()
for t in "$build"/tests/test_*; do
  [ -f "$t" ] && [ -x "$t" ] && tests+=("$t")
done
if [ ${#tests[@]} -eq 0 ]; then
  echo "memcheck: no test executables in $build/tests" >&2
  exit 1
fi

export CK_FORK=no
export TG_SOURCE_DIR="$src"
export TG_UNDER_VALGRIND=1
unset TG_ABORT_ON_ERROR
logdir="$build/memcheck-logs"
rm -rf "$logdir"
mkdir -p "$logdir"

# One test under valgrind; its output and valgrind's report go to files.
run_one() {
  local t=$1 name start rc=0
  name=$(basename "$t")
  start=$(date +%s)
  valgrind --quiet --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    --track-origins=yes --log-file="$logdir/$name.valgrind" \
    "$t" >"$logdir/$name.out" 2>&1 || rc=$?
  echo "$rc $(( $(date +%s) - start ))" >"$logdir/$name.status"
  if [ "$rc" -eq 0 ]; then
    echo "   ok      $name ($(( $(date +%s) - start ))s)"
  else
    echo "   FAILED  $name ($(( $(date +%s) - start ))s, exit $rc)"
  fi
}
export -f run_one
export logdir

echo "memcheck: ${#tests[@]} test programs under valgrind, $jobs at a time"
printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}

failed=()
for t in "${tests[@]}"; do
  name=$(basename "$t")
  read -r rc _ <"$logdir/$name.status" || rc=missing
  if [ "$rc" != 0 ]; then
    failed+=("$name")
    echo
    echo "==== $name (exit $rc): test output"
    cat "$logdir/$name.out"
    echo "==== $name: valgrind"
    cat "$logdir/$name.valgrind"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "memcheck: FAILED: ${failed[*]} (logs in $logdir)" >&2
  exit 1
fi
echo "memcheck: ${#tests[@]} test programs, 0 errors, 0 leaks"
