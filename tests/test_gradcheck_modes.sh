#!/usr/bin/env bash
# tapegrad-gradcheck's forward-mode checks (registered in tests/gradcheck_modes.cmake):
#   all      `check all --modes fwd,rev --adjoint` passes in float64 (exit 0),
#            every registered op appears, every mode has rows
#   adjoint  the seeded bug rmsnorm-scale at size 1e-6 passes `check` (its error
#            is inside rtol 1e-3) and fails `--adjoint` (exit 1) on x only, by
#            orders of magnitude; at the default size 0.1 both catch it
#   usage    --modes takes fwd and rev only (exit 2), not with --format json or
#            --seeds; an op without a tangent rule is an error naming it (exit 1)
# Usage: test_gradcheck_modes.sh PATH/TO/tapegrad-gradcheck CASE
set -euo pipefail
tool=${1:?usage: test_gradcheck_modes.sh TOOL CASE}
case_name=${2:?usage: test_gradcheck_modes.sh TOOL CASE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NO_COLOR=1

fail() { echo "FAIL: $*" >&2; exit 1; }
# run EXPECTED_STATUS ARGS...: runs the tool, output in $tmp/out and $tmp/err
run() {
  local want=$1; shift
  local st=0
  "$tool" "$@" > "$tmp/out" 2> "$tmp/err" || st=$?
  if [ "$st" -ne "$want" ]; then
    echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"
    fail "tapegrad-gradcheck $* exited $st, want $want"
  fi
}

case $case_name in
all)
  run 0 check all --modes fwd,rev --adjoint
  grep -q "all pass" "$tmp/out" || fail "no 'all pass' in the summary"
  for op in $("$tool" list | awk '/^seeded bugs/{exit} /^  [a-z_]+ /{print $1}'); do
    grep -q "^$op " "$tmp/out" || fail "op $op missing from the report"
  done
  for mode in rev fwd adjoint; do
    grep -Eq " $mode +[0-9]+/[0-9]+ " "$tmp/out" || fail "no $mode rows"
  done
  if grep -q FAIL "$tmp/out"; then fail "a FAIL in a passing run"; fi
  ;;
adjoint)
  run 0 check --inject rmsnorm-scale --shape '4x8;size=1e-6'
  grep -q "all pass" "$tmp/out" || fail "check should pass a 1e-6 bug"
  run 1 check --inject rmsnorm-scale --shape '4x8;size=1e-6' --adjoint
  grep -Eq " x +4x8 +adjoint +1/1 .* FAIL$" "$tmp/out" || fail "adjoint: x should FAIL"
  grep -Eq " gamma +8 +adjoint +0/1 .* pass$" "$tmp/out" || fail "adjoint: gamma should pass"
  grep -Eq " x +4x8 +rev +0/32 .* pass$" "$tmp/out" || fail "rev should pass x"
  # the error is ~1e6 times the adjoint tolerance
  ratio=$(awk '$3 == "adjoint" && $NF == "FAIL" {print $(NF-1)}' "$tmp/out")
  awk -v r="$ratio" 'BEGIN {exit !(r + 0 > 1e4)}' || fail "adjoint err/tol $ratio, want > 1e4"
  run 1 check --inject rmsnorm-scale --modes fwd,rev --adjoint
  grep -Eq "rev +[0-9]+/32 .* FAIL$" "$tmp/out" || fail "size 0.1: rev should FAIL"
  grep -Eq "fwd +0/32 .* pass$" "$tmp/out" || fail "size 0.1: fwd (the forward is right) should pass"
  ;;
usage)
  run 2 check rmsnorm --modes sideways
  grep -q "fwd and rev" "$tmp/err" || fail "--modes error"
  run 2 check rmsnorm --modes fwd --format json
  run 2 check rmsnorm --adjoint --seeds 10
  run 2 sweep rmsnorm --adjoint
  run 1 check --inject rmsnorm-r-const --adjoint
  grep -q "op 'rmsnorm\[bug:r-const\]' has no tangent rule" "$tmp/out" || fail "no-rule error"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
