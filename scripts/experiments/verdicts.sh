#!/usr/bin/env bash
# Experiment 4 of docs/experiments.md: the verdicts over scale. Every seeded
# bug (tools/gradcheck/inject.c) and the correct ops they are planted in, at
# input scales 1e-6 .. 1e6, float64 and float32, the tool's defaults, full
# mode, SEEDS seeds a cell (default 30). For the norms eps is 0.1 s^2 at
# scale s, so the function is the same at every scale (RMSNorm and
# LayerNorm are invariant to scaling x when eps scales with x^2) and any
# change over the scales is the check's own.
#
# Per seed, the verdict on x (the input every bug breaks): wrong, inconclusive
# or pass. A pass is SILENT when the bug is nevertheless beyond the
# tolerance: a float64 reference check at another step (h 1e-4 l, the
# dtype's atol and rtol) finds x wrong on the same seed; a pass the
# reference agrees with is a bug BELOW the tolerance there. A correct op's
# input found wrong is a FALSE POSITIVE. Every inconclusive verdict is
# counted with its reason (unresolved: a failure within the check's own
# error; all-zero: no comparison saw a gradient; error). Writes
# OUT/verdicts.csv and the table between the markers in docs/experiments.md,
# with the command that made it.
# Usage: bash scripts/experiments/verdicts.sh [--check]
#   --check: exit 1 when any silent pass or false positive is found
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seeds=${SEEDS:-30}
scales="1e-6 1e-3 1 1e3 1e6"
csv=$OUT/verdicts.csv
md=$OUT/verdicts.md

# the spec of a bug or op at scale s
spec_of() {
  case $1 in
    linear | linear-scale) echo "4x3,5x3" ;;
    *) echo "4x8;eps=$(awk -v s="$2" 'BEGIN {printf "%.17g", 0.1 * s * s}')" ;;
  esac
}
# per seed and input of a batch: "seed input verdict" (CSV rows of check)
verdicts() {
  { "$TOOL" check "$@" --seeds "$seeds" --format csv 2> /dev/null || true; } |
    awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
             {print $(c["input_seed"]), $(c["input"]), $(c["verdict"]), $(c["reason"])}'
}
# the counts of a cell from "seed input verdict reason" lines on stdin:
# wrong,inconclusive,pass,unresolved,all_zero,error
counts() {
  awk '{n[$3]++; if ($3 == "inconclusive") r[$4]++}
       END {printf "%d,%d,%d,%d,%d,%d", n["wrong"], n["inconclusive"], n["pass"], r["unresolved"], r["all-zero"], r["error"]}'
}
tol_of() { [ "$1" = f32 ] && echo "--atol 1e-3 --rtol 1e-2" || echo "--atol 1e-5 --rtol 1e-3"; }

echo "what,name,dtype,scale,wrong,inconclusive,pass,unresolved,all_zero,error,silent,below" > "$csv"
bugs=$("$TOOL" list | awk '/^seeded bugs/ {on = 1; next} on && /^  [a-z][a-z-]* +[a-z_]+ +[a-z_]+\(/ {print $1 ":" $2}')
for entry in $bugs; do
  bug=${entry%%:*}
  # a bug in part of softplus's domain: what it needs is coverage, not scale
  # (docs/gradcheck-guide.md, inputs a check did not see)
  [ "${entry#*:}" = softplus ] && continue
  for dt in f64 f32; do
    for s in $scales; do
      spec=$(spec_of "$bug" "$s")
      # shellcheck disable=SC2046
      verdicts --inject "$bug" --shape "$spec" --scale x="$s" --dtype $dt | awk '$2 == "x"' > "$OUT/v_run"
      # shellcheck disable=SC2046
      verdicts --inject "$bug" --shape "$spec" --scale x="$s" --dtype f64 --h 1e-4 $(tol_of $dt) |
        awk '$2 == "x"' > "$OUT/v_ref"
      c=$(counts < "$OUT/v_run")
      awk -v b="$bug" -v d=$dt -v s="$s" -v c="$c" 'NR == FNR {ref[$1] = $3; next}
        $3 == "pass" {if (ref[$1] == "wrong") silent++; else below++}
        END {printf "bug,%s,%s,%s,%s,%d,%d\n", b, d, s, c, silent, below}' \
        "$OUT/v_ref" "$OUT/v_run" >> "$csv"
    done
  done
done
for op in rmsnorm layernorm linear; do
  for dt in f64 f32; do
    for s in $scales; do
      c=$(verdicts "$op" --shape "$(spec_of $op "$s")" --scale x="$s" --dtype $dt | counts)
      echo "op,$op,$dt,$s,$c,0,0" >> "$csv"
    done
  done
done
rm -f "$OUT/v_run" "$OUT/v_ref"
echo "wrote $csv"

# the table: a row per bug (its x) and per correct op (every input), a
# column per dtype and scale; a cell "W/I/P" (wrong, inconclusive, pass
# out of the seeds; a correct op's inputs counted each), its inconclusive
# verdicts labelled with their reasons (u unresolved, z all-zero, e error),
# a bug's passes below the tolerance (b), silent passes and false
# positives marked
awk -F, -v seeds="$seeds" -v scales="$scales" '
  NR == 1 {next}
  {key = $1 "," $2; if (!(key in seen)) {seen[key] = 1; order[++nk] = key}
   w[key, $3, $4] = $5; i[key, $3, $4] = $6; p[key, $3, $4] = $7
   u[key, $3, $4] = $8; z[key, $3, $4] = $9; e[key, $3, $4] = $10; sil[key, $3, $4] = $11; bel[key, $3, $4] = $12
   ni += $6; nu += $8; nz += $9; ne += $10
   if ($1 == "bug") silent += $11; else fp += $5}
  END {
    ns = split(scales, S, " ")
    printf "| | |"; for (d = 1; d <= 2; d++) for (k = 1; k <= ns; k++) printf " %s %s |", (d == 1 ? "f64" : "f32"), S[k]
    printf "\n|---|---|"; for (k = 1; k <= 2 * ns; k++) printf "---|"; printf "\n"
    for (r = 1; r <= nk; r++) {
      split(order[r], kk, ","); printf "| %s | %s |", kk[1] == "bug" ? "bug" : "correct", kk[2]
      for (d = 1; d <= 2; d++) for (k = 1; k <= ns; k++) {
        dt = d == 1 ? "f64" : "f32"; c = order[r] SUBSEP dt SUBSEP S[k]
        cell = w[c] "/" i[c] "/" p[c]; lab = ""
        if (u[c] > 0) lab = lab " " u[c] "u"
        if (z[c] > 0) lab = lab " " z[c] "z"
        if (e[c] > 0) lab = lab " " e[c] "e"
        if (kk[1] == "bug" && bel[c] > 0) lab = lab " " bel[c] "b"
        if (lab != "") cell = cell " (" substr(lab, 2) ")"
        if (kk[1] == "bug" && sil[c] > 0) cell = cell " **" sil[c] " silent**"
        if (kk[1] == "op" && w[c] > 0) cell = cell " **false positive**"
        printf " %s |", cell
      }
      printf "\n"
    }
    printf "\nSilent passes: %d. False positives: %d. Inconclusive: %d (%d unresolved, %d all-zero, %d error), each labelled.\n", silent, fp, ni, nu, nz, ne
    printf "\nMade by `SEEDS=%s bash scripts/experiments/verdicts.sh` (tapegrad-gradcheck %s).\n", seeds, version
  }' version="$("$TOOL" --version | awk '{print $2}')" "$csv" > "$md"
cat "$md"

# into docs/experiments.md, between the markers
doc=docs/experiments.md
if grep -q "<!-- verdicts:begin -->" "$doc"; then
  awk -v f="$md" '/<!-- verdicts:begin -->/ {print; while ((getline l < f) > 0) print l; skip = 1; next}
                  /<!-- verdicts:end -->/ {skip = 0} !skip' "$doc" > "$OUT/experiments.md" && cp "$OUT/experiments.md" "$doc"
  echo "updated $doc"
fi
if [ "${1:-}" = "--check" ]; then
  grep -q "^Silent passes: 0. False positives: 0. " "$md" || { echo "silent passes or false positives" >&2; exit 1; }
fi
