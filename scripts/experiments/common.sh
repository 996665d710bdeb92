# Sourced by the experiment scripts of docs/experiments.md: the tool, the
# output folders, and gnuplot.
#   TOOL  tapegrad-gradcheck to run (default build/tools/tapegrad-gradcheck,
#         built there with cmake when missing)
#   OUT   where data goes (default out/experiments); figures go to docs/img/
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
TOOL=${TOOL:-build/tools/tapegrad-gradcheck}
OUT=${OUT:-out/experiments}
IMG=${IMG:-docs/img}
if [ ! -x "$TOOL" ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
  cmake --build build -j2 --target tapegrad-gradcheck > /dev/null
fi
mkdir -p "$OUT" "$IMG"
export NO_COLOR=1
# gnuplot with pngcairo when it has it, else png
gp_terminal() {
  if gnuplot -e 'set terminal' 2>&1 | grep -q pngcairo; then
    echo "set terminal pngcairo size $1,$2 font 'sans,10'"
  else
    echo "set terminal png size $1,$2"
  fi
}
