#!/usr/bin/env bash
# tapegrad-gradcheck as a learner uses it (registered in tests/custom_op.cmake):
#   diagnose  every seeded bug (--inject) gets the diagnosis that names its
#             pattern and cause, with the predicted error of the differences;
#             a correct op gets none; a Jacobian too big to read says so;
#             list NAME prints one entry with how its inputs are drawn
#   explain   the worked example of docs/normalization-gradients.md, section
#             7, from the guide's own numbers, prints the guide's values (to
#             the digits the guide gives), dx agreeing with central
#             differences and the invariants holding; several rows;
#             --print-inputs round-trips into explain; jacobian's projection
#             view with affine=0; memory's table; bad lists are usage errors
# Usage: test_learner_tool.sh PATH/TO/tapegrad-gradcheck CASE
set -euo pipefail
tool=${1:?usage: test_learner_tool.sh TOOL CASE}
case_name=${2:?usage: test_learner_tool.sh TOOL CASE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NO_COLOR=1

fail() { echo "FAIL: $*" >&2; exit 1; }
# run STATUS ARGS...: the tool's output (stdout and stderr) in $tmp/out
run() {
  local want=$1 st=0; shift
  "$tool" "$@" > "$tmp/out" 2>&1 || st=$?
  if grep -q "Sanitizer" "$tmp/out"; then cat "$tmp/out" >&2; fail "$*: a sanitizer reported an error"; fi
  [ "$st" -eq "$want" ] || { cat "$tmp/out" >&2; fail "$*: exit status $st, want $want"; }
}
has() { grep -qF -- "$1" "$tmp/out" || { cat "$tmp/out" >&2; fail "'$1' not in the output of the last run"; }; }
# line NAME: the numbers printed after "NAME =", without the equation after them
line() {
  awk -v k="$1" '$1 == k && $2 == "=" {
    s = ""; for (i = 3; i <= NF && $i ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/; i++) s = s " " $i; print s; exit
  }' "$tmp/out"
}
# near "WANT..." "GOT...": each number within 5e-7 (the guide gives 6 decimals)
near() {
  awk -v w="$1" -v g="$2" 'BEGIN {
    n = split(w, a, " "); m = split(g, b, " ");
    if (n != m) exit 1;
    for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (d > 5e-7) exit 1 }
  }' || fail "want ($1), got ($2)"
}

case $case_name in
diagnose)
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
  has "dx lacks - mean_j(u_j), u = gamma * dy"
  grep -q "diagnosis of gamma" "$tmp/out" && fail "layernorm-no-mean: gamma's gradient is right, yet diagnosed"

  run 1 check --inject overwrite
  has "diagnosis of x 4x8 (4x8): identity"
  has "overwritten instead of accumulated"
  has "every element's column of the Jacobians (32 of 32)"

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

  # the check's own error beside the error found: a bug is far beyond it
  # (wrong); a float32 check at too small an h fails within it -- the check
  # cannot decide (inconclusive, exit 3), and nothing is diagnosed
  run 1 check --inject layernorm-no-mean
  has "the backward is wrong, not the check"
  run 3 check rmsnorm --shape 4x8 --dtype f32 --h 1e-5
  has "a failure by no more than the check's own error at this step"
  grep -q "diagnosis" "$tmp/out" && fail "a round-off failure diagnosed as a bug"

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
  ;;
explain)
  common=(--gamma 1,0.5,2 --beta 0.1,0,-0.1 --dy 1,-1,-0.5 --eps 0)

  # RMSNorm, x = (1, 2, 2)
  run 0 explain rmsnorm --x 1,2,2 "${common[@]}"
  near "0.577350 1.154701 1.154701" "$(line xhat)"
  near "0.677350 0.577350 2.209401" "$(line y)"
  # the guide's notation: u = gamma * dy, the gradient reaching xhat
  near "1 -0.5 -1" "$(line u)"
  has "gamma * dy (the gradient reaching xhat)"
  has "mean_j (u_j xhat_j)"
  near "-0.384900" "$(line m | awk '{print $1}')"
  near "0.705650 -0.032075 -0.320750" "$(line dx)"
  near "0.577350 -1.154701 -0.577350" "$(line dgamma)"
  has "dx agrees with central differences"
  has "every check holds"

  # LayerNorm, x = (1, 3, 5)
  run 0 explain layernorm --x 1,3,5 "${common[@]}"
  near "3" "$(line mu | awk '{print $1}')"
  near "0.612372" "$(line r | awk '{print $1}')"
  near "-1.224745 0 1.224745" "$(line xhat)"
  near "-1.124745 0 2.349490" "$(line y)"
  has "mean u     = -0.166666666667    mean_j u_j"
  has "r (u - mean u - xhat m)"
  near "-0.816497" "$(line m | awk '{print $1}')"
  near "0.102062 -0.204124 0.102062" "$(line dx)"
  near "-1.224745 0 -0.612372" "$(line dgamma)"
  has "every check holds"

  # two rows; the inputs printed to full precision
  run 0 explain rmsnorm --shape 2x2 --x 0.1,3,-2,5
  has "row 1, C = 2"
  has "x     = 0.10000000000000001 3 -2 5"

  # jacobian's projection view (affine=0): the eigenvalues, J^2 = r J, the parts
  run 0 jacobian rmsnorm --shape '1x4;affine=0' --out "$tmp/jac"
  has "projection view"
  has "3 of them r (expected 3)"
  has "the parts r I, - r xhat xhat^T / C add up to the numeric J"
  run 0 jacobian layernorm --shape '1x4;affine=0;eps=0.01' --out "$tmp/jac"
  has "2 of them r (expected 2)"
  run 0 jacobian rmsnorm --shape 1x4 --out "$tmp/jac"
  grep -q "projection view" "$tmp/out" && fail "projection view with gamma: J is not a projection there"

  # --print-inputs: check's inputs to full precision, fed to explain
  run 0 check rmsnorm --shape '1x3;eps=0.001' --print-inputs
  x=$(sed -n 's/^    x 1x3 = //p' "$tmp/out" | tr ' ' ',')
  g=$(sed -n 's/^    gamma 3 = //p' "$tmp/out" | tr ' ' ',')
  [ -n "$x" ] && [ -n "$g" ] || { cat "$tmp/out" >&2; fail "--print-inputs: no x or gamma line"; }
  run 0 explain rmsnorm --x "$x" --gamma "$g" --eps 0.001
  has "x     = ${x//,/ }"

  # memory: fused 1 record and N doubles beyond x and gamma; composed 6 records
  run 0 memory rmsnorm --shape 64x48 --dtype f64
  awk '$1 == "fused" && $2 == 1 && $4 == 64 * 8 {ok = 1} END {exit !ok}' "$tmp/out" \
    || { cat "$tmp/out" >&2; fail "memory: fused is not 1 record and 512 bytes beyond x and gamma"; }
  awk '$1 == "composed" && $2 == 6 {ok = 1} END {exit !ok}' "$tmp/out" \
    || { cat "$tmp/out" >&2; fail "memory: composed RMSNorm is not 6 records"; }
  has "tg_tape_saved_bytes counts the inputs a record keeps by pointer"
  run 2 memory softmax

  # usage errors
  run 2 explain rmsnorm --x 1,2,x
  has "--x wants finite numbers"
  run 2 explain rmsnorm --x 1,2,3 --gamma 1,2
  has "--gamma has 2 numbers; it wants 3"
  run 2 explain softmax --x 1,2
  run 2 explain rmsnorm --x 1,2,3,4 --shape 3x2
  echo "explain: the guide's worked example, to its digits"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
