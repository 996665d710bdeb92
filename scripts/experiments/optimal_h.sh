#!/usr/bin/env bash
# Experiment 1 of docs/experiments.md: the best central-difference step h*
# of RMSNorm and LayerNorm against the input scale and eps, in float64 and
# float32, against the rule h* = 1.7 eps_mach^(1/3) l (l the row's length
# scale: sqrt(mean x^2 + eps) for RMSNorm, sqrt(var + eps) for LayerNorm).
#
# One `sweep` per op, scale and eps, each over 20 seeds in one process:
# absolute steps over eleven decades, eight a decade; h* is where the median
# of x's error relative to its gradient is smallest. Writes
# OUT/optimal_h.csv (op, dtype, scale, eps, l, h*, error there, h* /
# (eps_mach^(1/3) l), rho / l) and docs/img/optimal_h.png.
# Usage: bash scripts/experiments/optimal_h.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
csv=$OUT/optimal_h.csv
echo "op,dtype,scale,eps,l,best_h,rel_err,ratio,m_over_l" > "$csv"
for op in rmsnorm layernorm; do
  for eps in 1e-6 1e-4 1e-2 1; do
    for scale in 1e-3 1e-2 1e-1 1 1e1 1e2 1e3; do
      # steps from max(scale, 1) down eleven decades: h* <= 0.012 l, l <= max(1.2 scale, 1)
      top=$(awk -v s=$scale 'BEGIN {print (s > 1 ? s : 1)}')
      bottom=$(awk -v s=$top 'BEGIN {print s * 1e-11}')
      "$TOOL" sweep "$op" --shape "4x8;eps=$eps" --scheme central --scale x=$scale --seeds 20 \
          --h-grid "$top:$bottom:8" --format csv --out "$OUT/sweeps" |
        awk -F, -v op="$op" -v eps="$eps" -v scale="$scale" '
          $6 == "x" && $16 == 1 {
            c = ($4 == "float64") ? 6.0554544523933395e-06 : 4.9215666011518501e-03   # eps_mach^(1/3)
            # m / l: the size of the output in units of its slope, against l. RMSNorm
            # (no beta): rho / l, rho = sqrt(v) the size of the input, v = mean x^2,
            # so rho / l = sqrt(v / (v + eps)). LayerNorm adds beta (drawn like
            # gamma): about rho / l + 1, v = var.
            m = 1 - eps / ($14 * $14); m = m > 0 ? sqrt(m) : 0
            if (op == "layernorm") m += 1
            printf "%s,%s,%s,%s,%.6g,%.6g,%.6g,%.4f,%.6g\n", op, $4, scale, eps, $14, $8, $11, $8 / (c * $14), m
          }' >> "$csv"
    done
  done
done
echo "wrote $csv ($(($(wc -l < "$csv") - 1)) rows)"

# the constant: h* / (eps_mach^(1/3) l), its quantiles per dtype, where the
# input dominates eps (v >= eps: rho / l >= 0.7) and overall
for dt in float64 float32; do
  awk -F, -v dt=$dt 'NR > 1 && $2 == dt && ($9 >= 0.7 && $9 <= 1 || $9 >= 1.7) {print $8}' "$csv" | sort -g |
    awk -v dt="$dt, v >= eps" '
    {v[++n] = $1}
    END {printf "  %s: h* / (eps^(1/3) l): median %.2f, 10%% %.2f, 90%% %.2f, min %.2f, max %.2f (%d cases)\n",
         dt, v[int((n + 1) / 2)], v[int(n * 0.1) + 1], v[int(n * 0.9)], v[1], v[n], n}'
done

cat > "$OUT/optimal_h.gp" <<GP
$(gp_terminal 1200 520)
set output '$IMG/optimal_h.png'
set datafile separator ','
set multiplot layout 1,2 title 'Best central-difference step h* of RMSNorm and LayerNorm (4x8, 20 seeds): x scaled by 1e-3..1e3, eps 1e-6..1'
set logscale xy
set format x '10^{%L}'
set format y '10^{%L}'
set grid
set key top left box opaque
set xlabel 'l = sqrt(mean x^2 + eps) (RMSNorm), sqrt(var + eps) (LayerNorm)'
set ylabel 'measured h*'
set title 'h* against the length scale l'
c64 = 6.0554544523933395e-06
c32 = 4.9215666011518501e-03
plot [1e-4:3e3] 1.7 * c32 * x with lines lw 2 dt 2 lc rgb '#b2182b' title '1.7 eps32^{1/3} l', \\
     1.7 * c64 * x with lines lw 2 dt 2 lc rgb '#1f4e9c' title '1.7 eps64^{1/3} l', \\
     '$csv' using (strcol(1) eq 'rmsnorm' && strcol(2) eq 'float32' ? \$5 : NaN):6 with points pt 7 ps 0.9 lc rgb '#b2182b' title 'RMSNorm f32', \\
     '$csv' using (strcol(1) eq 'layernorm' && strcol(2) eq 'float32' ? \$5 : NaN):6 with points pt 6 ps 1.2 lc rgb '#b2182b' title 'LayerNorm f32', \\
     '$csv' using (strcol(1) eq 'rmsnorm' && strcol(2) eq 'float64' ? \$5 : NaN):6 with points pt 7 ps 0.9 lc rgb '#1f4e9c' title 'RMSNorm f64', \\
     '$csv' using (strcol(1) eq 'layernorm' && strcol(2) eq 'float64' ? \$5 : NaN):6 with points pt 6 ps 1.2 lc rgb '#1f4e9c' title 'LayerNorm f64'
set logscale x
unset logscale y
set format y '%.1f'
set format x '10^{%L}'
set yrange [0:3.5]
set xrange [5e-4:3]
set xlabel 'm / l  (RMSNorm: rho / l = sqrt(v / (v + eps)); LayerNorm: that + 1, for beta)'
set ylabel 'h* / (eps_{mach}^{1/3} l)'
set title 'the constant: 1.6..2.2 while m is near l, then 1.8 (m / l)^{1/3}'
set key bottom right box opaque
plot 1.8 * x**(1.0/3) with lines lw 2 dt 2 lc rgb 'gray30' title '1.8 (m / l)^{1/3}', \\
     '$csv' using (strcol(1) eq 'rmsnorm' && strcol(2) eq 'float32' ? \$9 : NaN):8 with points pt 7 ps 0.8 lc rgb '#b2182b' title 'RMSNorm f32', \\
     '$csv' using (strcol(1) eq 'rmsnorm' && strcol(2) eq 'float64' ? \$9 : NaN):8 with points pt 7 ps 0.8 lc rgb '#1f4e9c' title 'RMSNorm f64', \\
     '$csv' using (strcol(1) eq 'layernorm' && strcol(2) eq 'float32' ? \$9 : NaN):8 with points pt 6 ps 1.1 lc rgb '#b2182b' title 'LayerNorm f32', \\
     '$csv' using (strcol(1) eq 'layernorm' && strcol(2) eq 'float64' ? \$9 : NaN):8 with points pt 6 ps 1.1 lc rgb '#1f4e9c' title 'LayerNorm f64'
unset multiplot
GP
gnuplot "$OUT/optimal_h.gp" && echo "wrote $IMG/optimal_h.png"
