#!/usr/bin/env bash
# Formats every C file git tracks with the repository's .clang-format
# (clang-format 14, as Debian 12 ships it), or with --check only reports the
# files whose format differs and fails.
# Usage: scripts/format.sh [--check]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh clang-format
mapfile -t files < <(git ls-files '*.c' '*.h' '*.inc')
if [ "${1:-}" = "--check" ]; then
  if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/tg-format.$$; then
    grep -o '^[^:]*\.\(c\|h\|inc\)' /tmp/tg-format.$$ | sort -u | sed 's/^/not formatted: /'
    rm -f /tmp/tg-format.$$
    echo "run 'make format' to format them" >&2
    exit 1
  fi
  rm -f /tmp/tg-format.$$
  echo "format: ${#files[@]} files follow .clang-format"
else
  clang-format -i "${files[@]}"
fi
