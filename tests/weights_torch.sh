#!/usr/bin/env bash
# scripts/weights_torch.py under ctest: GPT-2 and LLaMA files written by
# PyTorch models imported into tapegrad, trained, exported and loaded back
# into PyTorch (compare only: the fixture stays as it is). Exit 77 (ctest:
# skipped) when no python3 here has PyTorch and NumPy; test_gpt_weights
# checks the C side against the fixture without them.
# Usage: tests/weights_torch.sh TEST_GPT_WEIGHTS_BINARY
set -euo pipefail
bin=${1:?usage: weights_torch.sh TEST_GPT_WEIGHTS_BINARY}
src=$(cd "$(dirname "$0")/.." && pwd)
tried=()
for py in ${TG_TORCH_PYTHON:-} /usr/bin/python3 python3; do
  tried+=("$py")
  if command -v "$py" > /dev/null 2>&1 && "$py" -c 'import numpy, torch' > /dev/null 2>&1; then
    exec "$py" "$src/scripts/weights_torch.py" --test-bin "$bin" --no-write
  fi
done
echo "skipped: no python3 with PyTorch and NumPy (tried ${tried[*]}; set TG_TORCH_PYTHON, or on Debian:" \
  "apt-get install python3-torch python3-numpy)"
exit 77
