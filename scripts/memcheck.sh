#!/usr/bin/env bash
# Runs every test executable of a build under valgrind: any error or any
# definitely/indirectly lost block fails. Check runs in-process (CK_FORK=no)
# so valgrind sees the tests themselves.
# Usage: scripts/memcheck.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: memcheck.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)

shopt -s nullglob
tests=("$build"/tests/test_*)
if [ ${#tests[@]} -eq 0 ]; then
  echo "memcheck: no test executables in $build/tests" >&2
  exit 1
fi

export CK_FORK=no
export TG_SOURCE_DIR="$src"
unset TG_ABORT_ON_ERROR
logdir="$build/memcheck-logs"
mkdir -p "$logdir"
failed=()
for t in "${tests[@]}"; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  echo "== valgrind $name"
  if valgrind --quiet --error-exitcode=1 --leak-check=full \
       --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
       --track-origins=yes --log-file="$logdir/$name.log" "$t"; then
    echo "   ok: 0 errors, 0 leaks"
  else
    echo "   FAILED ($logdir/$name.log):"
    cat "$logdir/$name.log"
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "memcheck: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "memcheck: ${#tests[@]} test programs, 0 errors, 0 leaks"
