#!/usr/bin/env bash
# `tapegrad-gradcheck explain` (registered in tests/custom_op.cmake): the
# worked example of docs/normalization-gradients.md, section 7, computed
# from the guide's own numbers, must print the guide's values (to the
# digits the guide gives), with dx agreeing with central differences and
# the invariants holding; several rows; bad lists are usage errors; and
# jacobian's projection view with affine=0; memory's table.
# Usage: test_explain_tool.sh PATH/TO/tapegrad-gradcheck
set -euo pipefail
tool=${1:?usage: test_explain_tool.sh TOOL}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
run() {
  local want=$1 st=0; shift
  "$tool" "$@" > "$tmp/out" 2>&1 || st=$?
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
common=(--gamma 1,0.5,2 --beta 0.1,0,-0.1 --dy 1,-1,-0.5 --eps 0)

# RMSNorm, x = (1, 2, 2)
run 0 explain rmsnorm --x 1,2,2 "${common[@]}"
near "0.577350 1.154701 1.154701" "$(line xhat)"
near "0.677350 0.577350 2.209401" "$(line y)"
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

# --print-inputs: check's inputs to full precision, as explain takes them
run 0 check rmsnorm --shape '1x3;eps=0.001' --print-inputs
has "eps = 0.001"
x=$(sed -n 's/^    x 1x3 = //p' "$tmp/out")
g=$(sed -n 's/^    gamma 3 = //p' "$tmp/out")
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
