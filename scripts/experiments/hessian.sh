#!/usr/bin/env bash
# The HVP experiment of docs/normalization-gradients.md (section 11): the
# top Hessian eigenvalue of a tiny MLP's loss, with and without RMSNorm
# after its first layer, as that layer's weights are scaled by c -- power
# iteration on Hessian-vector products (tg_hvp, the double backward), by
# the example program examples/hessian.c. Writes OUT/hessian.dat and
# docs/img/hessian_rmsnorm.png.
# Usage: bash scripts/experiments/hessian.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cmake --build build -j2 --target hessian > /dev/null
dat=$OUT/hessian.dat
build/examples/hessian --iters 100 > "$dat"
echo "wrote $dat"
cat "$dat"
gnuplot <<GP
$(gp_terminal 760 460)
set output '$IMG/hessian_rmsnorm.png'
set title "Top Hessian eigenvalue of a 4-16-2 tanh MLP's loss, first layer scaled by c"
set logscale xy 2
set format y '%g'
set xlabel 'c (W1 and b1 scaled by c)'
set ylabel '|top eigenvalue| (power iteration on HVPs)'
set key top right
set grid
plot '$dat' using 1:(abs(\$3)) with linespoints lw 2 pt 7 title 'first layer, plain', \
     '$dat' using 1:(abs(\$5)) with linespoints lw 2 pt 5 title 'first layer, RMSNorm', \
     '$dat' using 1:(abs(\$2)) with linespoints lw 1 pt 6 dt 2 title 'all parameters, plain', \
     '$dat' using 1:(abs(\$4)) with linespoints lw 1 pt 4 dt 2 title 'all parameters, RMSNorm', \
     '$dat' using 1:(1.0625/\$1**2) with lines lc rgb 'gray' dt 3 title '1.06 / c^2'
GP
echo "wrote $IMG/hessian_rmsnorm.png"
