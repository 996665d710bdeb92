#!/usr/bin/env bash
# tapegrad-gradcheck as a user runs it (registered in tests/gradcheck_tool.cmake):
#   check_all  `check all` passes in float64 (exit 0), every registered op appears
#   modes_all  `check all --modes fwd,rev --adjoint` passes in float64, every
#              registered op appears, every mode has rows
#   modes_adjoint  the seeded bug rmsnorm-scale at size 1e-6 passes `check` (inside
#              rtol 1e-3) and is WRONG under `--adjoint` (exit 1) on x only, by orders
#              of magnitude; at the default size 0.1 rev catches it and fwd passes;
#              every seeded bug passes fwd and is wrong in the adjoint test on x
#   modes_usage  --modes takes fwd and rev only (exit 2), not with --elements, and
#              is for check only; --format json parses and csv
#              has a row per input, mode and seed; --seeds runs every seed
#   order2     --order 2 passes for the fused norms in float64 and float32; its
#              JSON says order 2 and parses; --seeds; an op without a
#              double-backward rule is an error naming it (exit 3: inconclusive);
#              forward over reverse (--order 2 --modes fwd --adjoint) through the
#              fused norms and exact GELU
#   inject     each seeded bug makes the report WRONG with exit status 1, and only
#              the inputs whose gradient it breaks; the same op without the bug passes
#   fast       --mode fast: check all passes in f64 and f32, seeded bugs WRONG on the
#              joint row and localized, one projection (1 comparison, 3 forwards)
#   sweep      the best h of central differences in float64 lies in [1e-7, 1e-3]
#              for smooth ops (read from the .dat the sweep writes), and the other
#              curves' minima sit where the theory puts them
#   jacobian   both Jacobians printed, the heatmap data and picture written;
#              a seeded bug shows up as a failing Jacobian (exit 1); with
#              affine=0 the parts of J drawn, their sum J to rounding
#   usage      bad usage exits 2 and prints the reason and a pointer at --help
#              (no arguments: the usage text), a spec the op refuses
#              too (not 1, which means a wrong gradient); help exits 0
#   options    --atol 0 is taken as given; the injected bug's header names the
#              inputs the spec gives (bias=1, affine=0); float32 follows its defaults
#   list       every op with its spec and variants, and the bug catalogue
#   vanished   a step that rounds away is an error (exit 3) in every mode; the sweep
#              marks it and never takes it for the best step
#   formats    --format json parses (python3, when there) and csv has its rows, for
#              check, sweep and jacobian; --elements, --print-inputs
#   batch      --seeds 1000 of a 4x8 norm in one process, under 10 s (it takes well
#              under one); a range and a fixed seed; a partial detection rate
#   inputs     --values (and a wrong count), --save-inputs read back by --values @FILE
#              reproduces the check, --dist, --scale, --offset, the two seeds
#   scale      float32 norms pass at input scales 1e-3..1e3 and the bugs are caught
#              there; the old absolute step and atol did neither
#   note       the note blames the backward for genuine detections (every seed of
#              every seeded bug, both dtypes) and calls a too-small step the check's
#              own error (inconclusive)
#   predicted  the predicted error (truncation + rounding) beside the measured
#              one in check (every mode, --seeds), sweep, jacobian, JSON and CSV:
#              a correct op within it, a seeded bug far beyond; the op's own
#              step used and said to be
#   verdict_*  each a silent or wrong verdict that was: a tiny gradient 2.8x off
#              (scale), 0 against 0 everywhere (zero), an all-zero --r (r), an
#              --order 2 error counted as failures (order2), float32 round-off
#              blamed on the backward (f32), a linear op's 2% bug called round-off
#              (linear), a backward ignoring dy diagnosed as agreeing Jacobians
#              (dy), and the exit codes: > /dev/full, a NaN in explain (exit)
#   docs       every output quoted in docs/gradcheck.md, docs/gradcheck-guide.md
#              and docs/experiments.md is the tool's now
#              (scripts/gradcheck_docs.py --check)
#   cover      every report says what its inputs covered (range, signs, decades, the
#              op's regions seen and not); softplus-high, wrong only above x = 1.9,
#              is caught on some seeds of the default inputs and on every seed under
#              --cover; check all --cover finds nothing wrong in float64 and float32;
#              --cover keeps log's x positive and div's b nonzero, and one element over
#              15 seeds sees all 15 of softplus's regions
#   schema     every command's --format json validated against schema 1
#              (tests/gradcheck_schema.py, docs/gradcheck.md); --version; seeds as a
#              list; --seed with --seeds refused
# Usage: test_gradcheck_tool.sh PATH/TO/tapegrad-gradcheck CASE
set -euo pipefail
tool=${1:?usage: test_gradcheck_tool.sh TOOL CASE}
case_name=${2:?usage: test_gradcheck_tool.sh TOOL CASE}
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
# in_range X LO HI: true when LO <= X <= HI (floating point)
in_range() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN {exit !(x >= lo && x <= hi)}'; }
# best_h DAT COLUMN: the h (column 1) where COLUMN is smallest, NaN rows skipped
best_h() {
  awk -v c="$2" '!/^#/ && $c != "NaN" && $c != "nan" { if (!n++ || $c + 0 < m) { m = $c + 0; h = $1 } }
                 END { if (!n) exit 1; print h }' "$1"
}
have_gnuplot() { command -v gnuplot > /dev/null 2>&1; }
is_png() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]; }

case $case_name in
modes_all)
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
modes_adjoint)
  run 0 check --inject rmsnorm-scale --shape '4x8;size=1e-6'
  grep -q "all pass" "$tmp/out" || fail "check should pass a 1e-6 bug"
  run 1 check --inject rmsnorm-scale --shape '4x8;size=1e-6' --adjoint
  grep -Eq " x +4x8 +adjoint +1/1 .* WRONG$" "$tmp/out" || fail "adjoint: x should be WRONG"
  grep -Eq " gamma +8 +adjoint +0/1 .* pass$" "$tmp/out" || fail "adjoint: gamma should pass"
  grep -Eq " x +4x8 +rev +0/32 .* pass$" "$tmp/out" || fail "rev should pass x"
  # the error is ~1e6 times the adjoint tolerance
  ratio=$(awk '$3 == "adjoint" && $NF == "WRONG" {print $(NF-1)}' "$tmp/out")
  awk -v r="$ratio" 'BEGIN {exit !(r + 0 > 1e4)}' || fail "adjoint err/tol $ratio, want > 1e4"
  run 1 check --inject rmsnorm-scale --modes fwd,rev --adjoint
  grep -Eq "rev +[0-9]+/32 .* WRONG$" "$tmp/out" || fail "size 0.1: rev should be WRONG"
  grep -Eq "fwd +0/32 .* pass$" "$tmp/out" || fail "size 0.1: fwd (the forward is right) should pass"
  # every seeded bug: the forward (fwd) passes, the adjoint test fails on x
  for bug in $("$tool" list | awk '/^seeded bugs/{on=1; next} on && /^  [a-z][a-z-]* +[a-z]+ +[a-z]+\(/ {print $1}'); do
    run 1 check --inject $bug --modes fwd --adjoint
    if grep -Eq " fwd +[0-9]+/[0-9]+ .* (WRONG|inconclusive)$" "$tmp/out"; then fail "$bug: fwd should pass"; fi
    grep -Eq " x +[0-9x]+ +adjoint +1/1 .* WRONG$" "$tmp/out" || fail "$bug: the adjoint test should find x WRONG"
  done
  ;;
modes_usage)
  run 2 check rmsnorm --modes sideways
  grep -q "fwd and rev" "$tmp/err" || fail "--modes error"
  run 2 check rmsnorm --adjoint --elements
  run 2 sweep rmsnorm --adjoint
  # for programs: JSON (one check per mode, each with every input), CSV, and over seeds
  run 0 check rmsnorm --shape 2x4 --modes fwd,rev --adjoint --format json
  if command -v python3 > /dev/null 2>&1; then
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["modes"] == ["rev", "fwd", "adjoint"], d["settings"]["modes"]
assert [c["mode"] for c in d["checks"]] == ["rev", "fwd", "adjoint"], d["checks"]
assert all(c["result"]["pass"] and len(c["result"]["inputs"]) == 2 for c in d["checks"])
assert d["summary"]["pass"] and d["summary"]["inputs"]["pass"] == 6' "$tmp/out" || fail "--modes --format json"
  fi
  run 0 check rmsnorm --shape 2x4 --modes fwd --adjoint --format csv --seeds 3
  head -1 "$tmp/out" | grep -q "^op,bug,spec,dtype,input_seed,probe_seed,input,mode," || fail "--modes csv header"
  [ "$(grep -c '^rmsnorm,,2x4,float64,' "$tmp/out")" -eq 12 ] || fail "--modes csv: want 12 rows (3 seeds x 2 inputs x 2)"
  [ "$(grep -c '^rmsnorm,,2x4,float64,2,2,x,adjoint,1,0,.*,1,pass,none,$' "$tmp/out")" -eq 1 ] ||
    fail "--modes csv: no seed 2 adjoint row"
  run 1 check --inject rmsnorm-scale --shape '4x8;size=1e-6' --adjoint --format csv
  grep -Eq '^rmsnorm,rmsnorm-scale,.*,x,adjoint,1,1,.*,0,wrong,none,$' "$tmp/out" || fail "--adjoint csv: the bug's row"
  run 0 check rmsnorm --shape 2x4 --adjoint --seeds 2..3
  grep -q "seeds 2..3" "$tmp/out" || fail "--adjoint --seeds: the header"
  grep -q "2x4  seed 3" "$tmp/out" || fail "--adjoint --seeds: no rows of seed 3"
  ;;
order2)
  for op in rmsnorm layernorm; do
    for dt in f64 f32; do
      run 0 check $op --order 2 --dtype $dt
      grep -q "order 2" "$tmp/out" || fail "$op --order 2 --dtype $dt: the summary does not say order 2"
    done
  done
  run 0 check layernorm --order 2 --shape '2x5;bias=1' --format json
  if command -v python3 > /dev/null 2>&1; then
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["settings"]["order"] == 2 and d["summary"]["pass"] and len(d["checks"]) == 1
assert d["checks"][0]["order"] == 2' "$tmp/out" || fail "--order 2 --format json"
  fi
  run 0 check rmsnorm --order 2 --shape 2x4 --seeds 20
  grep -Eq "^  2x4 +x +20 +0 +0 +100.0%" "$tmp/out" || fail "--order 2 --seeds 20: x should pass every seed"
  run 3 check --inject rmsnorm-sum --order 2
  grep -q "'rmsnorm\[bug:sum\]' cannot be differentiated twice" "$tmp/out" || fail "--order 2: no error naming the op"
  # forward over reverse: tg_jvp through the double backward of the fused
  # norms and exact GELU (their records' tangent rules), H v against
  # differences of the gradient and against reverse over reverse
  for op in rmsnorm layernorm rmsnorm_composed gelu; do
    run 0 check $op --order 2 --modes fwd,rev --adjoint
    grep -q "all pass" "$tmp/out" || fail "$op --order 2 --modes fwd,rev --adjoint: not all pass"
    grep -Eq " fwd +[0-9]+/[0-9]+ " "$tmp/out" || fail "$op --order 2: no fwd rows"
    if grep -q "no tangent rule" "$tmp/out"; then fail "$op --order 2 --modes fwd: a record without a tangent rule"; fi
  done
  ;;
check_all)
  run 0 check all
  grep -q "all pass" "$tmp/out" || fail "check all: no 'all pass' in the summary"
  grep -q "FAIL" "$tmp/out" && fail "check all: a FAIL in the report of a passing run"
  n_ops=$(sed -n 's/^summary: \([0-9]*\) ops,.*/\1/p' "$tmp/out")
  [ -n "$n_ops" ] || fail "check all: no summary line"
  cp "$tmp/out" "$tmp/check"
  run 0 list
  n_list=$(sed -n 's/^\([0-9]*\) registered ops.*/\1/p' "$tmp/out")
  [ "$n_ops" = "$n_list" ] || fail "check all covered $n_ops ops, list shows $n_list"
  # every op named by list has a table in the check report
  for op in $(awk '/^  [a-z_0-9]+  / && !/^  -/ {print $1}' "$tmp/out" | head -n "$n_list"); do
    grep -q "^$op  " "$tmp/check" || fail "check all: no table for $op"
  done
  # every row of every table is a pass with 0 failed elements
  rows=$(grep -c ' pass$' "$tmp/check")
  [ "$rows" -gt "$n_ops" ] || fail "check all: only $rows passing rows for $n_ops ops"
  echo "check all: $n_ops ops, $rows input rows, all pass"
  # float32 with the float32 defaults and the ops' own steps: every op passes
  run 0 check rmsnorm --dtype f32
  run 0 check layernorm --dtype f32
  grep -q "float32" "$tmp/out" || fail "check --dtype f32 does not say float32"
  run 0 check all --dtype f32
  run 0 check all --dtype f32 --mode directional
  ;;
inject)
  # bug  inputs that must FAIL  inputs that must pass
  while read -r bug bad good; do
    run 1 check --inject "$bug"
    grep -q "with injected bug $bug" "$tmp/out" || fail "$bug: the report does not name the bug"
    grep -Eq "^summary: .*: [0-9]+ inputs? WRONG" "$tmp/out" || fail "$bug: no wrong input in the summary"
    for x in ${bad//,/ }; do
      grep -Eq "^ +([^ ]+ +)?$x +[0-9x]+ +[1-9][0-9]*/[0-9]+ .*WRONG$" "$tmp/out" || fail "$bug: input $x is not WRONG"
    done
    for x in ${good//,/ }; do
      [ "$x" = "-" ] && continue
      grep -Eq "^ +([^ ]+ +)?$x +[0-9x]+ +0/[0-9]+ .*pass$" "$tmp/out" || fail "$bug: input $x does not pass"
    done
    # NAME given explicitly is the same check
    op=$(sed -n "s/^\([a-z_]*\)  with injected bug $bug.*/\1/p" "$tmp/out")
    run 1 check "$op" --inject "$bug"
    # the same op and seed without the bug pass: the failure is the bug's
    run 0 check "$op" --shape "$(awk '$2 == "input" {getline; getline; print $1; exit}' "$tmp/out")"
    echo "inject $bug: WRONG on $bad, exit 1; $op without it passes"
  done <<'EOF'
rmsnorm-sum x,gamma -
rmsnorm-no-eps x,gamma -
layernorm-no-mean x gamma,beta
overwrite x gamma
EOF
  # a missing eps hides under rtol when eps << mean(x^2) (docs/gradcheck-guide.md)
  run 0 check --inject rmsnorm-no-eps --shape 4x8
  # overwriting is invisible while x is used once, exposed when used twice
  run 0 check --inject overwrite --shape '4x8;uses=1'
  grep -q "function checked: rmsnorm(x; gamma), x used once" "$tmp/out" || fail "overwrite uses=1: wrong function"
  run 1 check --inject overwrite --shape '4x8;uses=2;bias=1'
  run 2 check --inject overwrite --shape '4x8;uses=3'
  run 2 check --inject rmsnorm-sum --shape '4x8;uses=1'
  # a bug for another op is a usage error
  run 2 check layernorm --inject rmsnorm-sum
  grep -q "tapegrad-gradcheck --help" "$tmp/err" || fail "inject: no pointer at --help"
  run 2 check --inject no-such-bug
  ;;
fast)
  # --mode fast: one comparison over every input at once. Correct ops pass
  # in both dtypes; seeded bugs are wrong, on the joint row, and localized
  # by a directional check; with --seeds; one projection: 1 comparison, 2
  # forwards beside the recorded one and 1 backward (directional: 2 per
  # input); inconclusive stays exit 3; not for sweep or --modes.
  run 0 check all --mode fast
  grep -q "(fast) in .*: all pass" "$tmp/out" || fail "check all --mode fast: not all pass"
  run 0 check all --mode fast --dtype f32
  grep -q "float32 (fast) in .*: all pass" "$tmp/out" || fail "check all --mode fast --dtype f32: not all pass"
  while read -r bug row bad good; do
    run 1 check --inject "$bug" --mode fast
    grep -Eq "^ +[^ ]+ +$row +[0-9]+ el\. +1/1 .*WRONG$" "$tmp/out" || fail "fast $bug: row $row is not WRONG"
    grep -q "it says neither which input nor which element is wrong" "$tmp/out" || fail "fast $bug: no reach line"
    line=$(grep "a directional check of the same case" "$tmp/out") || fail "fast $bug: not localized"
    for x in ${bad//,/ }; do echo "$line" | grep -q " $x WRONG" || fail "fast $bug: $x not localized as WRONG"; done
    for x in ${good//,/ }; do
      [ "$x" = "-" ] || echo "$line" | grep -q " $x pass" || fail "fast $bug: $x not localized as pass"
    done
    echo "fast $bug: $row WRONG, localized to $bad"
  done <<'EOF'
rmsnorm-sum x\+gamma x,gamma -
layernorm-no-mean x\+gamma\+beta x gamma,beta
overwrite x\+gamma x gamma
EOF
  run 1 check --inject rmsnorm-sum --mode fast --seeds 5
  grep -Eq "^ +4x8 +x\+gamma +5 +5 .*WRONG$" "$tmp/out" || fail "fast --seeds: not wrong on every seed"
  run 0 check layernorm --mode fast --seeds 5
  run 3 check tanh --scale x=1e6 --mode fast
  # one projection: counts from the JSON result, against directional's
  command -v python3 > /dev/null 2>&1 || { echo "ok: fast (counts skipped: no python3)"; exit 0; }
  for m in fast directional; do
    run 0 check layernorm --shape 64x256 --mode $m --format json
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["checks"][0]["result"]; print(r["n_checked"], r["n_evals"], r["n_backwards"], ",".join(r["joint"]))' \
      "$tmp/out" > "$tmp/$m"
  done
  [ "$(cat "$tmp/fast")" = "1 3 1 x,gamma,beta" ] || fail "fast: checked, evals, backwards, joint: $(cat "$tmp/fast")"
  [ "$(cat "$tmp/directional")" = "3 7 1 " ] || fail "directional: $(cat "$tmp/directional")"
  run 2 sweep rmsnorm --mode fast
  run 2 check rmsnorm --mode fast --modes fwd
  run 2 check rmsnorm --mode fastest
  ;;
sweep)
  # Smooth ops (non-zero third derivative): the float64 central-difference
  # error is smallest between 1e-7 and 1e-3 (theory: ~eps^(1/3) = 6e-6).
  for op in rmsnorm layernorm rmsnorm_composed layernorm_composed tanh sigmoid gelu silu exp log softmax \
            log_softmax cross_entropy; do
    run 0 sweep "$op" --out "$tmp/sw"
    dat=$tmp/sw/sweep_$op.dat
    [ -s "$dat" ] || fail "sweep $op: no $dat"
    head -1 "$dat" | grep -q "h f64_central f64_forward f32_central f32_forward" || fail "sweep $op: bad header"
    rows=$(grep -vc '^#' "$dat")
    [ "$rows" -eq 45 ] || fail "sweep $op: $rows rows, want 45 (1e-1 .. 1e-12, 4 a decade)"
    h=$(best_h "$dat" 2)
    in_range "$h" 1e-7 1e-3 || fail "sweep $op: best h for float64 central differences is $h, not in [1e-7, 1e-3]"
    # the printed summary agrees with the data file
    printed=$(awk '$1 == "f64" && $2 == "central" && NF >= 4 {print $3; exit}' "$tmp/out")
    awk -v a="$printed" -v b="$h" 'BEGIN {exit !(a / b > 0.95 && a / b < 1.05)}' ||
      fail "sweep $op: printed best h $printed, data file says $h"
    hf=$(best_h "$dat" 3); hc32=$(best_h "$dat" 4); hf32=$(best_h "$dat" 5)
    echo "sweep $op: best h  f64 central $h  f64 forward $hf  f32 central $hc32  f32 forward $hf32"
  done
  # the other minima, for RMSNorm (theory: sqrt(eps64) 1.5e-8, cbrt(eps32) 4.9e-3, sqrt(eps32) 3.5e-4)
  dat=$tmp/sw/sweep_rmsnorm.dat
  in_range "$(best_h "$dat" 3)" 1e-9 1e-6 || fail "rmsnorm: float64 forward best h $(best_h "$dat" 3)"
  in_range "$(best_h "$dat" 4)" 3e-4 1e-1 || fail "rmsnorm: float32 central best h $(best_h "$dat" 4)"
  in_range "$(best_h "$dat" 5)" 1e-5 1e-2 || fail "rmsnorm: float32 forward best h $(best_h "$dat" 5)"
  # central beats forward at its best, in both dtypes
  awk '!/^#/ {for (c = 2; c <= 5; c++) if ($c != "NaN" && (!(c in m) || $c + 0 < m[c])) m[c] = $c + 0}
       END {exit !(m[2] < m[3] && m[4] < m[5])}' "$dat" || fail "rmsnorm: central differences are not the better scheme"
  [ -s "$tmp/sw/sweep_rmsnorm.gp" ] || fail "sweep: no gnuplot script"
  if have_gnuplot; then is_png "$tmp/sw/sweep_rmsnorm.png" || fail "sweep: sweep_rmsnorm.png is not a PNG"; fi
  # a seeded bug: the error no longer falls with h (a floor at the bug's size)
  run 0 sweep --inject rmsnorm-sum --out "$tmp/sw"
  awk '!/^#/ && $2 != "NaN" {if (!n++ || $2 + 0 < m) m = $2 + 0} END {exit !(m > 1e-2)}' \
      "$tmp/sw/sweep_rmsnorm-sum.dat" ||
    fail "sweep --inject rmsnorm-sum: the error fell below 1e-2"
  ;;
jacobian)
  run 0 jacobian rmsnorm --shape 1x5 --out "$tmp/jac"
  grep -q "analytic" "$tmp/out" && grep -q "numeric" "$tmp/out" || fail "jacobian: matrices not printed"
  grep -q "0 of 25 entries outside" "$tmp/out" || fail "jacobian rmsnorm: entries disagree"
  # five rows per matrix of d out / d x, analytic and numeric on one line
  n=$(grep -c '^  out\[0,[0-4]\] .* | ' "$tmp/out")
  [ "$n" -eq 10 ] || fail "jacobian: $n side-by-side rows, want 10 (x and gamma)"
  for x in x gamma; do
    dat=$tmp/jac/jacobian_rmsnorm_$x.dat
    [ -s "$dat" ] || fail "jacobian: no $dat"
    # three 5x5 blocks: analytic, numeric, difference
    [ "$(grep -vc '^#\|^$' "$dat")" -eq 15 ] || fail "jacobian: $dat does not hold three 5x5 matrices"
    if have_gnuplot; then is_png "$tmp/jac/jacobian_rmsnorm_$x.png" || fail "jacobian: no PNG for $x"; fi
  done
  # one input only; float32
  run 0 jacobian layernorm --shape 2x3 --input gamma --dtype f32 --out "$tmp/jac"
  [ -s "$tmp/jac/jacobian_layernorm_gamma.dat" ] || fail "jacobian --input gamma: no data"
  [ -e "$tmp/jac/jacobian_layernorm_x.dat" ] && fail "jacobian --input gamma also did x"
  # the overwrite bug: the difference is minus the identity (the lost residual)
  run 1 jacobian --inject overwrite --shape 1x4 --input x --out "$tmp/jac"
  grep -q "4 of 16 entries outside" "$tmp/out" ||
    fail "jacobian --inject overwrite: want exactly the 4 diagonal entries off"
  # the projection view (affine=0) draws the parts of J as heatmaps, and
  # their sum is J to rounding: LayerNorm three parts, RMSNorm two
  for op in layernorm:3 rmsnorm:2; do
    name=${op%:*} np=${op#*:}
    run 0 jacobian "$name" --shape '2x4;affine=0;eps=0.01' --out "$tmp/proj"
    dat=$tmp/proj/jacobian_${name}_x_parts.dat
    [ -s "$dat" ] || fail "jacobian $name affine=0: no $dat"
    # np parts and their sum, each the whole 8x8 Jacobian of x
    [ "$(grep -vc '^#\|^$' "$dat")" -eq $(((np + 1) * 8)) ] || fail "$dat: want $((np + 1)) 8x8 matrices"
    grep -q "^# r I:" "$dat" && grep -q "^# - r xhat xhat^T / C:" "$dat" || fail "$dat: parts r I, - r xhat xhat^T / C"
    if [ "$np" -eq 3 ]; then grep -q "^# - r 1 1^T / C:" "$dat" || fail "$dat: no part - r 1 1^T / C"; fi
    if have_gnuplot; then is_png "$tmp/proj/jacobian_${name}_x_parts.png" || fail "jacobian $name: no parts PNG"; fi
    # the sum of the parts (from x alone) against the analytic J: rounding
    # only; against the numeric J: within the differences' own error
    line=$(grep "the parts summed, every entry of J (8 x 8)" "$tmp/out") || fail "jacobian $name: no parts' sum line"
    ea=$(sed 's/.*max |sum - analytic J| = \([^ ]*\) .*/\1/' <<< "$line")
    en=$(sed 's/.*max |sum - numeric J| = \([^ ]*\) .*/\1/' <<< "$line")
    in_range "$ea" 0 1e-14 || fail "jacobian $name: parts sum off the analytic J by $ea, want rounding (<= 1e-14)"
    in_range "$en" 0 1e-8 || fail "jacobian $name: parts sum off the numeric J by $en, want <= 1e-8"
    # the sum drawn is the sum of the parts drawn (the .dat, entry by entry)
    awk -v np="$np" '/^#/ {b++; r = 0; next} NF {for (i = 1; i <= NF; i++) m[b, r, i] = $i; r++}
      END {for (r = 0; r < 8; r++) for (i = 1; i <= 8; i++) {s = 0; for (p = 1; p <= np; p++) s += m[p, r, i];
           d = s - m[np + 1, r, i]; if (d < 0) d = -d; if (d > 1e-9) exit 1}}' "$dat" ||
      fail "$dat: the sum panel is not the sum of the part panels"
  done
  # with gamma J is no projection: no parts drawn
  run 0 jacobian rmsnorm --shape 1x4 --out "$tmp/proj2"
  [ -e "$tmp/proj2/jacobian_rmsnorm_x_parts.dat" ] && fail "jacobian rmsnorm with gamma drew projection parts"
  run 2 jacobian rmsnorm --shape 64x64 --out "$tmp/jac"
  grep -q "small shapes" "$tmp/err" || fail "jacobian: a big shape is not refused"
  run 2 jacobian rmsnorm --shape 1x4 --input nope --out "$tmp/jac"
  ;;
usage)
  run 2
  grep -q "^usage: tapegrad-gradcheck" "$tmp/err" || fail "no arguments: no usage text on stderr"
  for args in "frobnicate" "check" "check nosuchop" "check all --shape 4x8" "check rmsnorm --dtype f16" \
              "check rmsnorm --h 0" "check rmsnorm --h abc" "check rmsnorm --atol -1" "check rmsnorm --mode half" \
              "check rmsnorm --seed -3" "check rmsnorm --bogus" "check rmsnorm --h" "check rmsnorm tanh" \
              "sweep rmsnorm --atol 1e-3" "list extra" "check rmsnorm --shape 4x" "check rmsnorm --shape 4x8;norm=3" \
              "jacobian" "sweep rmsnorm --shape 3x4,4x5x" "check rmsnorm --atol -0.5" \
              "check matmul --shape 2x3,4x5" "check rmsnorm --shape 4x0" "check rmsnorm --shape 4x8;eps=-1" \
              "check layernorm --shape 4x0" "check cross_entropy --shape 4x5;smoothing=2" \
              "sweep matmul --shape 2x3,4x5" "jacobian rmsnorm --shape 4x8;eps=-1" \
              "check --inject rmsnorm-sum --shape 4x8;eps=-1"; do
    # shellcheck disable=SC2086
    run 2 $args
    grep -q "^tapegrad-gradcheck: " "$tmp/err" || fail "'$args': no message saying what was wrong"
    # the reason is not buried under the usage text: a line or two, then --help
    [ "$(wc -l < "$tmp/err")" -le 3 ] || fail "'$args': $(wc -l < "$tmp/err") lines of stderr (the reason is buried)"
    tail -1 "$tmp/err" | grep -q "tapegrad-gradcheck --help" || fail "'$args': no pointer at --help"
    [ -s "$tmp/out" ] && fail "'$args': wrote a report to stdout"
    echo "usage error, exit 2: $args -- $(head -1 "$tmp/err")"
  done
  # a refused spec: the op's own message, not a report of a wrong gradient
  run 2 check matmul --shape 2x3,4x5
  grep -q "tg_matmul" "$tmp/err" || fail "matmul 2x3,4x5: the message does not name tg_matmul"
  run 2 check cross_entropy --shape '4x5;smoothing=2'
  grep -q "smoothing" "$tmp/err" || fail "smoothing=2: the message does not name the smoothing"
  run 0 help
  grep -q "^usage: tapegrad-gradcheck" "$tmp/out" || fail "help: no usage on stdout"
  run 0 check --help
  ;;
options)
  # --atol 0: a purely relative test, as the header says (was: a usage error)
  run 0 check rmsnorm --shape 4x8 --atol 0
  grep -q "passes when |analytic - numeric| <= 0 G + 0.001 |numeric|" "$tmp/out" || fail "--atol 0: not used as 0"
  run 0 jacobian rmsnorm --shape 1x4 --atol 0 --rtol 1e-4 --out "$tmp/jac"
  grep -q "0 of 16 entries outside 0 G + 0.0001 |numeric|" "$tmp/out" || fail "jacobian --atol 0: not used as 0"
  # float32: the dtype's defaults (h 1e-3 unless the op has its own, relative
  # to each element's length scale; atol relative to the gradient's scale),
  # and the op's own step where `list` shows one
  run 0 check tanh --dtype f32 --shape 3x4
  grep -q "float32, every element, central differences h=0.001, relative steps h l_i .*, passes when .* <= 0.001 G + 0.01 |numeric|" \
    "$tmp/out" || fail "f32 tanh: not the float32 defaults"
  run 0 check rmsnorm --dtype f32 --shape 4x8
  grep -q "central differences h=0.01," "$tmp/out" || fail "f32 rmsnorm: not its own h=0.01"
  run 0 check rmsnorm --dtype f32 --shape 4x8 --h 2e-3
  grep -q "central differences h=0.002," "$tmp/out" || fail "f32 rmsnorm --h 2e-3: not taken"
  run 0 check rmsnorm --shape 4x8
  grep -q "central differences h=1e-06," "$tmp/out" || fail "f64 rmsnorm: not the float64 default"
  run 0 list
  grep -q "own       float32 h=0.01" "$tmp/out" || fail "list: the ops' own steps are not shown"
  # the injected bug's header names the function with the inputs the spec gives
  run 1 check --inject overwrite --shape '4x8;bias=1'
  grep -q "function checked: rmsnorm(x; gamma, beta) + x$" "$tmp/out" || fail "overwrite bias=1: header"
  run 1 check --inject rmsnorm-sum --shape '4x8;affine=0'
  grep -q "function checked: rmsnorm(x)$" "$tmp/out" || fail "rmsnorm-sum affine=0: header"
  run 1 check --inject layernorm-no-mean --shape '4x8;bias=0'
  grep -q "function checked: layernorm(x; gamma)$" "$tmp/out" || fail "layernorm-no-mean bias=0: header"
  run 0 check --inject overwrite --shape '4x8;uses=1;affine=0'
  grep -q "function checked: rmsnorm(x), x used once$" "$tmp/out" || fail "overwrite uses=1 affine=0: header"
  run 0 sweep --inject overwrite --shape '4x8;bias=1' --out "$tmp/sw"
  grep -q "function checked: rmsnorm(x; gamma, beta) + x$" "$tmp/out" || fail "sweep overwrite bias=1: header"
  run 1 jacobian --inject overwrite --shape '1x4;bias=1' --input x --out "$tmp/jac"
  grep -q "function checked: rmsnorm(x; gamma, beta) + x$" "$tmp/out" || fail "jacobian overwrite bias=1: header"
  ;;
list)
  run 0 list
  for op in add matmul softmax cross_entropy dropout linear rmsnorm layernorm rmsnorm_composed layernorm_composed; do
    grep -q "^  $op  " "$tmp/out" || fail "list: no $op"
  done
  grep -q "spec      X;norm=K;eps=E" "$tmp/out" || fail "list: rmsnorm's options not shown"
  grep -q "inputs    x 4x8, gamma 8" "$tmp/out" || fail "list: rmsnorm's inputs not shown"
  grep -q "variants  4x8   4x8;bias=1" "$tmp/out" || fail "list: rmsnorm's variants not shown"
  for bug in rmsnorm-sum rmsnorm-no-eps layernorm-no-mean overwrite; do
    grep -q "^  $bug " "$tmp/out" || fail "list: bug $bug missing from the catalogue"
  done
  ;;
vanished)
  # a step that rounds away is an error in every mode, never a pass
  for mode in full directional jacobian; do
    run 3 check --inject rmsnorm-sum --mode "$mode" --h 1e-17
    grep -q "the step vanished" "$tmp/out" || fail "$mode, h=1e-17: no word of the vanished step"
    grep -q "all pass" "$tmp/out" && fail "$mode, h=1e-17: passed"
    run 3 check rmsnorm --shape 4x8 --mode "$mode" --h 1e-17
  done
  # the sweep marks such steps and never picks one as the best
  run 0 sweep rmsnorm --mode directional --dtype f32 --out "$tmp/sw"
  grep -q "vanished" "$tmp/out" || fail "f32 directional sweep: no step marked vanished"
  h=$(best_h "$tmp/sw/sweep_rmsnorm.dat" 2)
  in_range "$h" 1e-3 1e-1 || fail "f32 directional sweep: best h $h (not in [1e-3, 1e-1])"
  awk '!/^#/ && $1 < 1e-8 && $2 != "NaN" && $2 != "nan" {bad = 1} END {exit bad}' "$tmp/sw/sweep_rmsnorm.dat" ||
    fail "f32 directional sweep: a number where the step vanished"
  ;;
formats)
  have_python() { command -v python3 > /dev/null 2>&1; }
  json_ok() { if have_python; then python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1"; fi; }
  run 0 check rmsnorm --format json
  json_ok "$tmp/out" || fail "check --format json: not JSON"
  grep -q '"grad_scale":' "$tmp/out" || fail "check json: no grad_scale"
  run 1 check --inject rmsnorm-sum --format json --elements --print-inputs
  json_ok "$tmp/out" || fail "check --inject --format json --elements: not JSON"
  grep -q '"elements":\[{"input":"x","index":0' "$tmp/out" || fail "json --elements: no elements"
  grep -q '"values":{"x":{"shape":\[4,8\]' "$tmp/out" || fail "json --print-inputs: no inputs"
  run 0 check rmsnorm --shape 4x8 --seeds 20 --format json
  json_ok "$tmp/out" || fail "check --seeds --format json: not JSON"
  grep -q '"seeds":\[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19\],"runs":20' "$tmp/out" ||
    fail "check --seeds json: no batch"
  run 0 check rmsnorm --shape 4x8 --seeds 20 --format csv
  [ "$(wc -l < "$tmp/out")" -eq 41 ] || fail "check --seeds 20 --format csv: want a header and 40 rows"
  head -1 "$tmp/out" | grep -q "^op,bug,spec,dtype,input_seed,probe_seed,input,pass," || fail "csv header"
  run 0 check rmsnorm --shape 2x3 --format csv --elements
  [ "$(wc -l < "$tmp/out")" -eq 10 ] || fail "check --elements --format csv: want 9 rows"
  run 0 sweep rmsnorm --format json --seeds 3 --h-grid 1e-1:1e-6:2 --out "$tmp/sw"
  json_ok "$tmp/out" || fail "sweep --format json: not JSON"
  if have_python; then
    python3 -c 'import json, sys; h = json.load(open(sys.argv[1]))["sweep"]["h"]
assert len(h) == 11 and abs(h[0] - 0.1) < 1e-15 and abs(h[-1] - 1e-6) < 1e-18, h' "$tmp/out" ||
      fail "sweep json: not the grid asked for"
  fi
  run 0 sweep rmsnorm --format csv --dtype f64 --scheme central --h-grid 1e-2,1e-4,1e-6 --out "$tmp/sw"
  # all inputs, x and gamma, three steps each
  [ "$(grep -c '^rmsnorm,' "$tmp/out")" -eq 9 ] || fail "sweep --format csv: want 9 rows"
  run 0 jacobian rmsnorm --shape 1x4 --format json --out "$tmp/jac"
  json_ok "$tmp/out" || fail "jacobian --format json: not JSON"
  grep -q '"analytic":\[\[' "$tmp/out" || fail "jacobian json: no matrix"
  run 0 jacobian rmsnorm --shape 1x3 --input x --format csv --out "$tmp/jac"
  [ "$(wc -l < "$tmp/out")" -eq 10 ] || fail "jacobian --format csv: want 9 entries"
  run 0 jacobian rmsnorm --shape 1x3 --seeds 10
  grep -q "every Jacobian entry" "$tmp/out" || fail "jacobian --seeds: not the Jacobian mode"
  ;;
batch)
  # 1000 seeds of a 4x8 norm in one process, well under a second of checks
  for dt in f64 f32; do
    run 0 check rmsnorm --shape 4x8 --dtype $dt --seeds 1000
    grep -q "x 1000 seeds" "$tmp/out" || fail "--seeds 1000: not 1000 seeds"
    grep -Eq "^ +4x8 +x +1000 +0 +0 +100.0%" "$tmp/out" || fail "--seeds 1000 $dt: x does not pass every seed"
    secs=$(sed -n 's/.* in \([0-9.]*\) s (.*/\1/p' "$tmp/out")
    echo "check rmsnorm 4x8 $dt, 1000 seeds: $secs s ($(sed -n 's/.*(\([0-9.]* us a check\).*/\1/p' "$tmp/out"))"
    in_range "$secs" 0 10 || fail "1000 seeds took $secs s"
  done
  # a range of seeds, and one seed held fixed
  run 0 check rmsnorm --shape 4x8 --seeds 5..9 --input-seed 3
  grep -q "seeds 5..9 (inputs fixed at seed 3)" "$tmp/out" || fail "--seeds A..B --input-seed"
  # a bug's detection rate: a direction sees a 0.105% error in dx only when
  # the directional derivative is large enough for it to clear atol
  run 1 check --inject rmsnorm-scale --shape '4x8;size=1.05e-3' --seeds 200 --mode directional
  rate=$(awk '$2 == "x" {print $6; exit}' "$tmp/out" | tr -d %)
  in_range "$rate" 5 95 || fail "rmsnorm-scale size=1.05e-3: pass rate $rate%, want partial"
  ;;
inputs)
  # explicit values, printed back in full precision, saved and loaded again
  run 2 check rmsnorm --shape 1x4 --values x=1,2,3
  grep -q "3 values for an input of 4 elements" "$tmp/err" || fail "--values: wrong count not named"
  run 2 check rmsnorm --shape 1x4 --values nope=1
  run 0 check rmsnorm --shape 1x4 --values x=1,2,3,4 --print-inputs
  grep -q "x 1x4 = 1 2 3 4" "$tmp/out" || fail "--values x: not the values printed"
  run 0 check rmsnorm --shape 2x3 --dtype f32 --save-inputs "$tmp/in" --seed 4
  sed -n 's/.*x *2x3 .* \([0-9]*\/[0-9]*\) .*/\1/p' "$tmp/out" > "$tmp/a"
  grep -q "^# x 2x3 float32" "$tmp/in/x.txt" || fail "--save-inputs: no x.txt"
  cp "$tmp/out" "$tmp/first"
  run 0 check rmsnorm --shape 2x3 --dtype f32 --values x=@"$tmp/in/x.txt" --values gamma=@"$tmp/in/gamma.txt" \
      --input-seed 99 --probe-seed 4
  diff <(grep "^  2x3" "$tmp/first") <(grep "^  2x3" "$tmp/out") > /dev/null || fail "saved inputs do not reproduce the check"
  # distributions, scale, offset
  run 0 check rmsnorm --shape 2x4 --dist x=normal:0:0.01 --print-inputs
  awk '/=/ {f = /^    x 2x4 =/; next} f && NF {for (i = 1; i <= NF; i++) if ($i > 0.1 || $i < -0.1) bad = 1}
       !NF {f = 0} END {exit bad}' "$tmp/out" || fail "--dist x=normal:0:0.01: a value beyond 10 sigma"
  run 0 check rmsnorm --shape 1x3 --dist x=uniform:1:2 --scale x=10 --offset x=-100 --print-inputs
  awk '/^    x 1x3 =/ {for (i = 5; i <= NF; i++) if ($i < -90 || $i > -80) bad = 1} END {exit bad}' "$tmp/out" ||
    fail "--dist/--scale/--offset: x not in [-90, -80)"
  # the probe seed alone moves r, the input seed alone the inputs
  run 0 check rmsnorm --shape 2x3 --input-seed 1 --probe-seed 2 --print-inputs
  grep -q "input seed 1, probe seed 2" "$tmp/out" || fail "seeds not in the header"
  run 0 check rmsnorm --shape 2x3 --input-seed 1 --probe-seed 7 --print-inputs
  ;;
scale)
  # float32 checks of correct norms pass at input scales 1e-3 .. 1e3 (the
  # relative defaults), and still catch the seeded bugs there
  for s in 1e-3 1 1e3; do
    for op in rmsnorm layernorm; do
      run 0 check $op --shape 4x8 --dtype f32 --scale x=$s --seeds 50
      run 0 check $op --shape 4x8 --dtype f32 --scale x=$s --seeds 50 --mode directional
    done
    # (overwrite is left out: the identity term it loses is l times smaller
    # than RMSNorm's own gradient, below rtol at l = 1e-3: docs/experiments.md)
    for bug in rmsnorm-sum layernorm-no-mean rmsnorm-scale rmsnorm-proj; do
      run 1 check --inject $bug --dtype f32 --scale x=$s --seeds 20
      awk '$2 == "x" && $4 != 20 {exit 1}' "$tmp/out" || fail "$bug at scale $s: not caught every seed"
    done
    echo "scale $s: correct norms pass, bugs caught"
  done
  # what the old absolute step and atol did: a step 10 times x at 1e-3 (every
  # seed inconclusive: the check's own truncation) and a 50% bug missed at 1e3
  run 3 check rmsnorm --shape 4x8 --dtype f32 --scale x=1e-3 --seeds 20 --step absolute --h 1e-2 --atol-scale absolute
  awk '$1 == "4x8" && $2 == "x" && $5 != 20 {exit 1}' "$tmp/out" ||
    fail "absolute step at scale 1e-3: not inconclusive every seed"
  st=0; "$tool" check --inject rmsnorm-scale --shape '4x8;size=0.5' --dtype f32 --scale x=1e3 --seeds 20 \
      --step absolute --h 1e-2 --atol-scale absolute > "$tmp/out" || st=$?
  [ "$st" -ne 1 ] || fail "absolute atol at scale 1e3: the 50% bug found"
  rate=$(awk '$2 == "x" {print $6; exit}' "$tmp/out" | tr -d %)
  in_range "$rate" 80 100 || fail "absolute atol at scale 1e3: a 50% bug caught in $rate% of seeds, want most missed"
  run 1 check --inject rmsnorm-scale --shape '4x8;size=0.5' --dtype f32 --scale x=1e3 --seeds 20
  awk '$2 == "x" && $4 != 20 {exit 1}' "$tmp/out" || fail "relative atol at scale 1e3: the 50% bug not caught every seed"
  ;;
note)
  # genuine float32 detections: WRONG, beyond the check's own error
  run 1 check --inject rmsnorm-no-eps --shape '4x8;eps=1e-2' --dtype f32 --scale x=0.3 --seeds 100
  grep -q "WRONG: beyond 2 times the check's own error, so the backward is wrong" "$tmp/out" ||
    fail "rmsnorm-no-eps: the note does not blame the backward"
  grep -q "inconclusive" "$tmp/out" && fail "rmsnorm-no-eps: a genuine bug called inconclusive"
  # a correct op failing at a far too small float32 step: its own error, inconclusive
  run 3 check rmsnorm --shape 4x8 --dtype f32 --h 1e-6
  grep -q "a failure by no more than the check's own error at this step" "$tmp/out" ||
    fail "f32 h=1e-6: the note does not call it the check's own error"
  grep -q "WRONG" "$tmp/out" && fail "f32 h=1e-6: the note blames a correct backward"
  run 3 check matmul --dtype f32 --shape 70x65,65x40 --h 1e-4 --step absolute
  grep -q "a failure by no more than the check's own error" "$tmp/out" || fail "matmul f32 h=1e-4: not the check's error"
  # every seeded bug, in both dtypes: no seed inconclusive, every failure the backward's
  for bug in rmsnorm-sum rmsnorm-no-eps layernorm-no-mean overwrite rmsnorm-scale rmsnorm-proj layernorm-unbiased \
             rmsnorm-r-const rmsnorm-m-sum rmsnorm-ignore-dy linear-scale; do
    for dt in f64 f32; do
      run 1 check --inject $bug --dtype $dt --seeds 20
      # a row: [spec] input seeds wrong inconclusive ...
      awk '{for (i = 1; i <= 2; i++) if ($i ~ /^(x|gamma|beta|weight|bias)$/ && $(i + 1) == 20) {if ($(i + 3) != 0) exit 1; next}}' \
        "$tmp/out" || fail "$bug $dt: a seed inconclusive"
    done
  done
  ;;
predicted)
  # the predicted error (truncation + rounding) beside the measured one, in
  # every mode and format, and sane: a correct op's error within it, a
  # seeded bug's far beyond it, the sum of its parts, a V over h
  # rows_pred FILE: "input maxabs pred trunc round" of each row of a check table
  rows_pred() { awk '{for (i = 1; i <= NF; i++) if ($i == "=" && $(i + 2) == "+" && $(i - 1) ~ /^[0-9]/) {
                        print ($2 ~ /^[0-9]/ ? $1 : $2), $(i - 2), $(i - 1), $(i + 1), $(i + 3); next}}' "$1"; }
  for mode in full directional jacobian; do
    run 0 check rmsnorm --shape 4x8 --mode $mode
    grep -q "predicted = trunc + round" "$tmp/out" || fail "check --mode $mode: no predicted column"
    rows_pred "$tmp/out" > "$tmp/p"
    [ "$(wc -l < "$tmp/p")" -eq 2 ] || fail "check --mode $mode: want a predicted cell on both rows"
    # 2 significant digits printed: the parts add up to within 10%
    awk '{if (!($3 > 0) || $2 > $3 || ($4 + $5) < 0.9 * $3 || ($4 + $5) > 1.1 * $3) {print; exit 1}}' "$tmp/p" ||
      fail "check --mode $mode: a correct rmsnorm's error not within its predicted error, or parts not summing"
  done
  grep -q "step and tolerances: h 1e-06 (the float64 default), atol 1e-05 (the float64 default)" "$tmp/out" ||
    fail "check: where h and atol came from is not said"
  # a seeded bug: x's error a thousand times over the prediction
  run 1 check --inject rmsnorm-sum
  rows_pred "$tmp/out" | awk '$1 == "x" {found = 1; if ($2 < 1e3 * $3) exit 1} END {exit !found}' ||
    fail "check --inject rmsnorm-sum: x's error not far beyond the predicted error"
  # the op's own step is the one used, and said to be; a given one wins
  run 0 check softmax --dtype f32 --shape 8x65
  grep -q "h=0.01" "$tmp/out" && grep -q "h 0.01 (softmax's own for float32, its descriptor)" "$tmp/out" ||
    fail "check softmax f32: its own h 1e-2 not used or not said"
  run 0 check softmax --dtype f32 --shape 8x65 --h 1e-3
  grep -q "h 0.001 (given)" "$tmp/out" || fail "check --h: not said to be given"
  # over seeds: the median predicted error beside the median error (both / G)
  run 0 check rmsnorm --shape 4x8 --seeds 20
  # the row: spec input seeds failed rate p50 p90 max pred-p50 ...
  awk '$2 == "x" && $3 == 20 {found = 1; if (!($9 > 0) || $6 > $9) exit 1} END {exit !found}' "$tmp/out" ||
    fail "check --seeds: no sane pred p50 (want rel err p50 <= pred p50)"
  # sweep: a pred column per curve; the error within it at every step, and
  # the prediction a V (high at both ends, low near the optimum)
  run 0 sweep rmsnorm --dtype f64 --scheme central --h-grid 1e-1:1e-10:1 --out "$tmp/sw"
  grep -q "f64 central     pred" "$tmp/out" || fail "sweep: no pred column"
  awk '$1 ~ /^[0-9]\.[0-9]e-[0-9]+$/ && NF >= 3 && !seen[$1]++ {e = $2; p = ($3 == "*") ? $4 : $3;
         if (!(p > 0) || e > p) exit 1; pr[$1] = p}
       END {if (!(pr["1.0e-05"] < pr["1.0e-01"] && pr["1.0e-05"] < pr["1.0e-10"])) exit 1}' "$tmp/out" ||
    fail "sweep: the error exceeds the prediction somewhere, or the prediction is not a V"
  head -1 "$tmp/sw/sweep_rmsnorm.dat" | grep -q "f64_central_pred" || fail "sweep .dat: no predicted column"
  run 0 sweep rmsnorm --format csv --dtype f64 --scheme central --h-grid 1e-2,1e-6 --out "$tmp/sw"
  head -1 "$tmp/out" | grep -q ",best,predicted$" || fail "sweep csv: no predicted column"
  awk -F, 'NR > 1 && $7 == "all" && !($NF > 0 && $11 <= $NF) {exit 1}' "$tmp/out" ||
    fail "sweep csv: predicted not positive or below the error"
  # jacobian: per entry, in text and CSV
  run 0 jacobian rmsnorm --shape 1x4 --out "$tmp/jac"
  grep -q "predicted: the differences' own error at h = 1e-06 is" "$tmp/out" || fail "jacobian: no predicted line"
  run 0 jacobian rmsnorm --shape 1x4 --format csv --out "$tmp/jac"
  head -1 "$tmp/out" | grep -q ",difference,predicted$" || fail "jacobian csv: no predicted column"
  awk -F, 'NR > 1 {n++; d = $10 < 0 ? -$10 : $10; if (!($11 > 0) || d > $11) exit 1} END {exit n != 32}' "$tmp/out" ||
    fail "jacobian csv: want 32 entries, each |difference| <= predicted > 0"
  # JSON and CSV of check: the three fields, the parts adding up
  run 0 check rmsnorm --shape 2x3 --format csv
  head -1 "$tmp/out" | grep -q "pred_max,pred_trunc,pred_round" || fail "check csv: no predicted columns"
  if command -v python3 > /dev/null; then
    run 0 check rmsnorm --shape 2x3 --format json
    python3 - "$tmp/out" << 'PY' || fail "check json: predicted fields missing or not trunc + round"
import json, sys
doc = json.load(open(sys.argv[1]))
for case in doc["checks"]:
    for inp in case["result"]["inputs"]:
        p, t, r = inp["pred_max"], inp["pred_trunc"], inp["pred_round"]
        assert p > 0 and abs(p - (t + r)) <= 1e-12 * p and inp["max_abs_err"] <= p, inp
PY
  fi
  ;;
verdict_scale)
  # a tiny gradient: RMSNorm without gamma at x ~ 1e6 has dx ~ 1e-6, below
  # an absolute atol of 1e-5; its rstd from the sum of squares (dx 2.8x
  # off) is wrong at every scale, both dtypes (eps far below mean x^2, so
  # the bug shows); the right op passes there
  for dt in f64 f32; do
    for s in 1e-6 1 1e6; do
      run 1 check --inject rmsnorm-sum --shape '4x8;affine=0;eps=1e-30' --scale x=$s --dtype $dt
      grep -Eq "^  4x8;affine=0;eps=1e-30 +x +4x8 .* WRONG$" "$tmp/out" || fail "rmsnorm-sum at $s $dt: x not WRONG"
      run 0 check rmsnorm --shape '4x8;affine=0;eps=1e-30' --scale x=$s --dtype $dt
    done
  done
  run 1 check --inject rmsnorm-sum --shape '4x8;affine=0' --scale x=1e6
  ;;
verdict_zero)
  # 0 against 0 everywhere: a saturated tanh, sigmoid, softmax -- an
  # all-zero backward would pass, so the check is inconclusive (exit 3)
  for c in "tanh --scale x=1e6" "sigmoid --scale x=1e6" "softmax --scale x=1e4" "tanh --scale x=1e6 --mode directional"; do
    # shellcheck disable=SC2086
    run 3 check $c
    grep -q "(all-zero)" "$tmp/out" || fail "check $c: not called all-zero"
    grep -q "so a backward that gave 0 would pass too" "$tmp/out" || fail "check $c: the note does not say why"
    if grep -q "all pass" "$tmp/out"; then fail "check $c: all pass"; fi
  done
  # a constant output (the gradient exactly 0) still passes
  run 0 check tril --shape '3x6;diagonal=-7'
  ;;
verdict_r)
  # an all-zero weighting r, like an all-zero direction v, is refused
  run 2 check rmsnorm --shape 2x3 --r 0,0,0,0,0,0
  grep -q "not all zero" "$tmp/err" || fail "--r 0,...: no reason"
  run 2 check rmsnorm --shape 2x3 --v x=0,0,0,0,0,0 --mode directional
  ;;
verdict_order2)
  # a bug without a double-backward rule: an error, nothing checked -- no
  # input counted as failing, exit 3
  for seeds in 1 2; do
    run 3 check --order 2 --inject rmsnorm-sum --seeds $seeds
    grep -q "cannot be differentiated twice" "$tmp/out" || fail "--order 2 --seeds $seeds: the error not named"
    grep -q "0 inputs checked" "$tmp/out" || fail "--order 2 --seeds $seeds: inputs counted as checked"
    if grep -Eq "WRONG|FAIL|checks failed" "$tmp/out"; then fail "--order 2 --seeds $seeds: a failure reported"; fi
  done
  ;;
verdict_f32)
  # float32 sigmoid at x ~ 1e-6: f(x + h) == f(x - h) in float32, the numeric
  # side 0 against 0.25: the check cannot decide -- no "wrong backward" note
  # and no diagnosis inventing a term
  run 3 check sigmoid --dtype f32 --scale x=1e-6
  grep -q "(unresolved)" "$tmp/out" || fail "sigmoid f32 1e-6: not unresolved"
  if grep -Eq "WRONG|a wrong backward|diagnosis|extra 0.25" "$tmp/out"; then fail "sigmoid f32 1e-6: blames the backward"; fi
  # softmax float32 at 100: the note and the diagnosis agree -- a WRONG
  # input has its diagnosis, an inconclusive one neither
  run 3 check softmax --dtype f32 --scale x=100 --seed 1
  if grep -Eq "WRONG|a wrong backward|diagnosis" "$tmp/out"; then fail "softmax f32 x100: blames the backward"; fi
  # a too small float32 step: round-off, inconclusive
  run 3 check rmsnorm --shape 4x8 --dtype f32 --h 1e-6
  ;;
verdict_linear)
  # a linear op has no truncation error: its 2% bug at linear's float32
  # step 0.1 is wrong in every seed (it was called round-off, and a batch
  # counted 73 of 100 as wrong)
  run 1 check --inject linear-scale --dtype f32 --seeds 100
  awk '$1 ~ /^4x3,5x3/ && $2 == "x" {found = 1; if ($4 != 100) exit 1} END {exit !found}' "$tmp/out" ||
    fail "linear-scale f32: not wrong in all 100 seeds"
  awk '$1 == "weight" || $1 == "bias" {if ($3 != 0 || $NF != "pass") exit 1}' "$tmp/out" ||
    fail "linear-scale f32: weight or bias not passing"
  if grep -q "inconclusive" "$tmp/out"; then fail "linear-scale f32: inconclusive"; fi
  ;;
verdict_dy)
  # a backward that ignores dy (dx = J^T 1): the diagnosis, with the
  # check's own weighting, names it
  run 1 check --inject rmsnorm-ignore-dy
  grep -q "diagnosis of x 4x8 (4x8): ignores-dy" "$tmp/out" || fail "ignore-dy: not diagnosed"
  grep -q "ignores the incoming gradient" "$tmp/out" || fail "ignore-dy: the cause not said"
  if grep -q "Jacobians agree" "$tmp/out"; then fail "ignore-dy: 'Jacobians agree'"; fi
  ;;
verdict_exit)
  # one meaning per exit code; a report that cannot be written is not a pass
  st=0; "$tool" check tanh --shape 3x4 > /dev/full 2> "$tmp/err" || st=$?
  [ "$st" -eq 3 ] || fail "check > /dev/full exited $st, want 3"
  grep -q "could not write" "$tmp/err" || fail "check > /dev/full: no message"
  st=0; "$tool" list > /dev/full 2> /dev/null || st=$?
  [ "$st" -eq 3 ] || fail "list > /dev/full exited $st, want 3"
  # a NaN is never a pass: var + eps = 0
  run 3 explain layernorm --x 5,5,5 --eps 0
  if grep -q "every check holds" "$tmp/out"; then fail "explain with NaN: every check holds"; fi
  grep -q "not a number" "$tmp/out" || fail "explain with NaN: not said"
  run 0 explain layernorm --x 1,2,4 --eps 0
  run 0 check tanh --shape 3x4
  run 1 check --inject rmsnorm-sum
  run 2 check tanh --bogus
  ;;
cover)
  # the row of a batch: "SPEC INPUT SEEDS WRONG INCONCL RATE ..." -> WRONG
  wrong_of() { awk '$2 == "x" && $3 ~ /^[0-9]+$/ {print $4; exit}' "$tmp/out"; }
  run 1 check --inject softplus-high --seeds 20
  w=$(wrong_of)
  [ -n "$w" ] && [ "$w" -ge 1 ] && [ "$w" -le 19 ] || fail "default inputs: $w of 20 seeds wrong, want some but not all"
  grep -Eq "^  6x6;size=1.9 +x: +-1\.9[0-9]* +1\.9[0-9]* .* \[10,100\)" "$tmp/out" ||
    fail "default inputs: the coverage does not say x stayed in (-2, 2) and never reached [10,100)"
  run 1 check --inject softplus-high --seeds 20 --cover
  [ "$(wrong_of)" = 20 ] || fail "--cover: $(wrong_of) of 20 seeds wrong, want 20"
  grep -Eq "^  6x6;size=1.9 +x: .* 15/15 +-$" "$tmp/out" || fail "--cover: not every region of softplus seen"
  # a correct op: nothing wrong anywhere (inconclusive, exit 3, is allowed)
  for dt in f64 f32; do
    st=0; "$tool" check all --cover --dtype $dt --seeds 6 -q > "$tmp/out" 2> "$tmp/err" || st=$?
    [ "$st" -eq 0 ] || [ "$st" -eq 3 ] || { cat "$tmp/out"; fail "check all --cover --dtype $dt exited $st"; }
    if grep -q "WRONG" "$tmp/out"; then cat "$tmp/out"; fail "check all --cover --dtype $dt: a correct op WRONG"; fi
  done
  # one element, 15 seeds: softplus's 15 regions in turn
  run 0 check softplus --shape "()" --cover --seeds 15
  grep -Eq "^  \(\) +x: .* 15/15 +-$" "$tmp/out" || fail "(): 15 seeds do not visit the 15 regions"
  command -v python3 > /dev/null 2>&1 || { echo "ok: cover (json skipped: no python3)"; exit 0; }
  # the domain kept (log's x > 0, div's b != 0), the coverage is the values'
  for op in log div pow_scalar; do
    st=0; "$tool" check $op --cover --seeds 4 --format json --print-inputs > "$tmp/$op.json" || st=$?
    [ "$st" -eq 0 ] || [ "$st" -eq 3 ] || fail "$op --cover exited $st"
  done
  python3 - "$tmp" <<'PY' || fail "--cover: a value outside the op's domain, or a coverage that is not the values'"
import json, sys
d = sys.argv[1]
for op, name, ok in (("log", "x", lambda v: v > 0), ("div", "b", lambda v: v != 0), ("pow_scalar", "x", lambda v: v > 0)):
    doc = json.load(open(f"{d}/{op}.json"))
    for c in doc["checks"]:
        vals = c["values"][name]["values"]
        assert all(ok(v) for v in vals), (op, c["spec"], min(vals))
        cov = next(x for x in c["coverage"] if x["name"] == name)
        assert cov["min"] == min(vals) and cov["max"] == max(vals) and cov["numel"] == len(vals), (op, cov)
        assert cov["n_neg"] == sum(v < 0 for v in vals) and cov["n_pos"] == sum(v > 0 for v in vals), (op, cov)
PY
  ;;
schema)
  # one JSON schema (docs/gradcheck.md) for every command: each output
  # validated field by field (tests/gradcheck_schema.py); --version names it
  command -v python3 > /dev/null 2>&1 || { echo "ok: schema (skipped: no python3)"; exit 0; }
  run 0 --version
  grep -q "^tapegrad-gradcheck [0-9]*\.[0-9]*\.[0-9]* (JSON schema 1)$" "$tmp/out" || fail "--version"
  n=0
  while IFS='|' read -r want args; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    run "$want" ${args//OUTDIR/$tmp/o} --format json
    cp "$tmp/out" "$tmp/doc$n.json"
    python3 "$(dirname "$0")/gradcheck_schema.py" "$tmp/doc$n.json" || fail "$args: not schema 1"
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(d["summary"]["exit_status"] != int(sys.argv[2]))' \
      "$tmp/doc$n.json" "$want" || fail "$args: summary.exit_status is not the exit status $want"
  done <<'COMMANDS'
0|check rmsnorm
0|check rmsnorm --shape 4x8 --seeds 5
1|check --inject rmsnorm-sum --elements --print-inputs
1|check --inject rmsnorm-sum --seeds 3..4
0|check rmsnorm --shape 2x4 --modes fwd,rev --adjoint --seeds 2
1|check --inject rmsnorm-scale --shape 4x8;size=1e-6 --adjoint
0|check layernorm --order 2 --shape 2x5
3|check --order 2 --inject rmsnorm-sum --seeds 2
3|check tanh --scale x=1e6
0|check all --mode directional
1|check --inject rmsnorm-sum --mode fast
0|check layernorm --mode fast --seeds 3
1|check --inject softplus-high --cover --seeds 3
0|jacobian rmsnorm --shape 1x3 --out OUTDIR
0|jacobian rmsnorm --shape 1x3 --seeds 3
0|sweep rmsnorm --seeds 2 --h-grid 1e-1:1e-6:2 --out OUTDIR
COMMANDS
  # every seed as a list, every number to 17 significant digits
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["seeds"] == [3, 4], d["seeds"]' \
    "$tmp/doc4.json" || fail "--seeds 3..4: the seeds are not listed"
  grep -Eq '"max_abs_err":[0-9.e+-]{17,}' "$tmp/doc1.json" || fail "json: a number without its 17 digits"
  # --seed beside --seeds is refused, not ignored
  run 2 check rmsnorm --seed 3 --seeds 2
  grep -q "together" "$tmp/err" || fail "--seed with --seeds: no reason"
  echo "schema: $n commands, every one schema 1"
  ;;
docs)
  # every tool output quoted in docs/gradcheck.md, docs/gradcheck-guide.md
  # and docs/experiments.md (the script's DOCS) is what the tool prints now
  # (times and written files aside)
  command -v python3 > /dev/null 2>&1 || { echo "ok: docs (skipped: no python3)"; exit 0; }
  root=$(cd "$(dirname "$0")/.." && pwd)
  python3 "$root/scripts/gradcheck_docs.py" --check --build "$(dirname "$(dirname "$tool")")" ||
    fail "a quoted output is stale: scripts/gradcheck_docs.py --update"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
