#!/usr/bin/env bash
# An exercise of examples/exercises/ (registered in tests/custom_op.cmake):
# its reference solution is checked and passes (exit 0, "solved"); the file
# as a learner gets it, backward not written, fails with exit 1 and a
# helpful message -- the input, the diagnosis (no gradient reaches it) and
# where the derivation is -- with no crash and no sanitizer report.
# Usage: test_exercise.sh EXERCISES_DIR NAME
set -euo pipefail
dir=${1:?usage: test_exercise.sh DIR NAME} name=${2:?usage: test_exercise.sh DIR NAME}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  local want=$1 prog=$2 st=0
  "$dir/$prog" > "$tmp/out" 2>&1 || st=$?
  if grep -q "Sanitizer" "$tmp/out"; then cat "$tmp/out" >&2; fail "$prog: a sanitizer reported an error"; fi
  [ "$st" -eq "$want" ] || { cat "$tmp/out" >&2; fail "$prog: exit status $st, want $want"; }
}
has() { grep -qF -- "$1" "$tmp/out" || { cat "$tmp/out" >&2; fail "'$1' not in the output"; }; }

run 0 "exercise_${name}_solution"
has "solved: every gradient matches central differences"
run 1 "exercise_${name}"
has "WRONG"
has ": zero"
has "the backward never adds into this input's gradient"
has "not solved yet: the derivation is in docs/"
echo "exercise $name: the solution passes, the unsolved file fails with a diagnosis"
