#!/usr/bin/env bash
# The diagnosis under a failing `tapegrad-gradcheck check` (registered in
# tests/custom_op.cmake): every seeded bug (--inject) gets the diagnosis
# that names its pattern and cause; a correct op gets none; a Jacobian too
# big to read says so; and list NAME.
# Usage: test_diagnose_tool.sh PATH/TO/tapegrad-gradcheck
set -euo pipefail
tool=${1:?usage: test_diagnose_tool.sh TOOL}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NO_COLOR=1

fail() { echo "FAIL: $*" >&2; exit 1; }
# run STATUS ARGS...: the tool's output in $tmp/out
run() {
  local want=$1 st=0; shift
  "$tool" "$@" > "$tmp/out" 2>&1 || st=$?
  [ "$st" -eq "$want" ] || { cat "$tmp/out" >&2; fail "$*: exit status $st, want $want"; }
}
has() { grep -qF -- "$1" "$tmp/out" || { cat "$tmp/out" >&2; fail "'$1' not in the output of the last run"; }; }

run 1 check --inject rmsnorm-sum
has "diagnosis of x 4x8 (4x8): statistic"
has "the backward uses r x 0.353553 (1/sqrt(C) = 1/sqrt(8)) in place of r"
has "from the sum of squares instead of the mean"
has "diagnosis of gamma 8 (4x8): scale"

run 1 check --inject rmsnorm-no-eps
has "diagnosis of x 4x8 (4x8;eps=0.1): statistic"
has "a missing eps: the backward computes r = 1/sqrt(mean x^2) without eps (eps = 0.1)"
has "the difference shrinks with eps"

run 1 check --inject layernorm-no-mean
has "diagnosis of x 4x8 (4x8): mean-term"
has "constant along each row of x"
has "a dropped mean term"
grep -q "diagnosis of gamma" "$tmp/out" && fail "layernorm-no-mean: gamma's gradient is right, yet diagnosed"

run 1 check --inject overwrite
has "diagnosis of x 4x8 (4x8): identity"
has "overwritten instead of accumulated"
has "every element (32 of 32)"

# the bugs written with the custom-op API (inject_norm.c)
run 1 check --inject rmsnorm-r-const
has "diagnosis of x 4x8 (4x8): projection"
has "-1 x the projection term"
has "r = rstd treated as a constant"
grep -q "diagnosis of gamma" "$tmp/out" && fail "rmsnorm-r-const: gamma's gradient is right, yet diagnosed"
run 1 check --inject rmsnorm-m-sum
has "7 x the projection term"
has "summed instead of averaged"
run 1 check --inject layernorm-unbiased
has "diagnosis of x 4x8 (4x8): statistic"
has "the backward uses r x 0.935415 (sqrt((C-1)/C), C = 8)"
has "from the unbiased variance"
run 1 check --inject rmsnorm-r-const --dtype f32
has "diagnosis of x 4x8 (4x8): projection"

# a correct op: no diagnosis
run 0 check rmsnorm --shape 4x8
grep -q "diagnosis" "$tmp/out" && fail "rmsnorm passes, yet a diagnosis was printed"

# the predicted error of the differences beside the measured one: a bug is
# far beyond it; a float32 check at too small an h fails within it
run 1 check --inject layernorm-no-mean
has "far beyond, so the backward is wrong, not the check"
run 1 check rmsnorm --shape 4x8 --dtype f32 --h 1e-5
has "within reach of the differences' own error"
has "not from a wrong gradient"

# list NAME: one entry, with how its inputs are drawn
run 0 list rmsnorm
has "drawn     x: uniform [-2, 2)"
has "gamma: uniform [-2, 2)"
grep -q "registered ops and layers" "$tmp/out" && fail "list rmsnorm printed the whole list"
run 2 list no-such-op

# too big to read: said, not attempted
run 1 check --inject layernorm-no-mean --shape 64x40
has "too big to read here (2560 x 2560)"
echo "diagnose tool: every seeded bug diagnosed, the correct op not"
