#!/usr/bin/env bash
# Experiment 2 of docs/experiments.md: how often a check catches a bug, as
# the bug grows, for full and directional checks in float64 and float32
# (the tool's defaults for each: steps and atol relative to the input's and
# the gradient's scale).
#
# Two bugs of a chosen relative size (tools/gradcheck/inject.c), RMSNorm
# 4x8: rmsnorm-scale (dx times 1 + size: every element off by `size`) and
# rmsnorm-proj (the projection term - xhat mean(u xhat) times 1 + size);
# sizes 1e-6..1, three a decade; 200 seeds each (inputs and probe vectors
# drawn anew), one `check --seeds 200` per point. Then the seeded bugs at
# their own specs, and layernorm-unbiased at C = 8, 32, 128. Writes
# OUT/detection.csv, OUT/detection_bugs.csv and docs/img/detection.png.
# Usage: bash scripts/experiments/detection.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
seeds=${SEEDS:-200}
csv=$OUT/detection.csv
# one batch as CSV (exit status 1, a wrong gradient found, or 3, some seed
# inconclusive, is the point here)
batch() { local st=0; "$TOOL" check "$@" --seeds "$seeds" --format csv || st=$?; [ "$st" -ne 2 ]; }
# the detection rate of input x over the seeds of one batch (CSV rows): the
# seeds whose verdict on x is wrong
rate() {
  awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
           $(c["input"]) == "x" {n++; if ($(c["verdict"]) == "wrong") f++} END {printf "%.4f", n ? f / n : 0}'
}
# the rows BUG,LABEL,DTYPE,MODE,RATE of one bug and spec in both dtypes and modes
rates() {
  for dt in f64 f32; do
    for mode in full directional; do
      echo "$1,$3,$dt,$mode,$(batch --inject "$1" --shape "$2" --dtype $dt --mode $mode | rate)"
    done
  done
}
echo "bug,size,dtype,mode,rate" > "$csv"
for bug in rmsnorm-scale rmsnorm-proj; do
  for size in 1e-6 2.15e-6 4.64e-6 1e-5 2.15e-5 4.64e-5 1e-4 2.15e-4 4.64e-4 1e-3 2.15e-3 4.64e-3 1e-2 2.15e-2 \
              4.64e-2 1e-1 2.15e-1 4.64e-1 1; do
    rates $bug "4x8;size=$size" $size >> "$csv"
  done
done
echo "wrote $csv"

bugs=$OUT/detection_bugs.csv
echo "bug,spec,dtype,mode,rate" > "$bugs"
while read -r bug spec; do
  rates $bug "$spec" "$spec" >> "$bugs"
done <<'BUGS'
rmsnorm-sum 4x8
rmsnorm-no-eps 4x8;eps=0.1
rmsnorm-no-eps 4x8;eps=1e-2
layernorm-no-mean 4x8
overwrite 4x8
layernorm-unbiased 4x8
layernorm-unbiased 4x32
layernorm-unbiased 4x128
BUGS
echo "wrote $bugs"
column -t -s, "$bugs"

# one data file per curve, so gnuplot draws each as a line
for bug in rmsnorm-scale rmsnorm-proj; do
  for dt in f64 f32; do
    for mode in full directional; do
      awk -F, -v b=$bug -v d=$dt -v m=$mode '$1 == b && $3 == d && $4 == m {print $2, $5}' "$csv" \
        > "$OUT/detection_${bug}_${dt}_${mode}.dat"
    done
  done
done
cat > "$OUT/detection.gp" <<GP
$(gp_terminal 1200 500)
set output '$IMG/detection.png'
set multiplot layout 1,2 title 'Detection rate of a bug of relative size s (RMSNorm 4x8, $seeds seeds a point; the tool defaults of each dtype)'
set logscale x
set format x '10^{%L}'
set xrange [1e-6:1]
set yrange [-0.02:1.02]
set grid
set xlabel 'bug size s'
set ylabel 'fraction of seeds that fail'
set key top left box opaque
do for [b in 'rmsnorm-scale rmsnorm-proj'] {
  set title b eq 'rmsnorm-scale' ? 'rmsnorm-scale: dx times 1 + s' : 'rmsnorm-proj: the projection term times 1 + s'
  f(d, m) = sprintf('$OUT/detection_%s_%s_%s.dat', b, d, m)
  plot f('f64', 'full') using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f4e9c' title 'f64 full', \\
       f('f64', 'directional') using 1:2 with linespoints lw 2 dt 2 pt 6 lc rgb '#1f4e9c' title 'f64 directional', \\
       f('f32', 'full') using 1:2 with linespoints lw 2 pt 7 lc rgb '#b2182b' title 'f32 full', \\
       f('f32', 'directional') using 1:2 with linespoints lw 2 dt 2 pt 6 lc rgb '#b2182b' title 'f32 directional'
}
unset multiplot
GP
gnuplot "$OUT/detection.gp" && echo "wrote $IMG/detection.png"
