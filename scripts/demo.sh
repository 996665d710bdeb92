#!/usr/bin/env bash
# `make demo`: the main job. Trains the spiral classifier three ways (no
# norm, RMSNorm, LayerNorm) with the same seed and data, prints the final
# loss and accuracy of each, and writes out/demo/loss.png (the three loss
# curves) and out/demo/boundary.png (the learned decision regions).
# Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
out=out/demo
mkdir -p "$out"
"$build/examples/spiral" --norm all --seed 1 --out "$out"
