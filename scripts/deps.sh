#!/usr/bin/env bash
# Checks that what tapegrad's build, tests and demo need is installed, and
# installs what is missing on Debian/Ubuntu:
#   - as root:     apt-get update && apt-get install -y <missing packages>
#   - otherwise:   prints the exact `sudo apt-get install -y ...` and exits 1.
# Usage: scripts/deps.sh [extra ...]   extras: valgrind, clang (for the fuzzer),
#                                      clang-format, openblas (for make bench)
set -euo pipefail

missing=()
need() {  # need PACKAGE TEST...
  local pkg=$1; shift
  if ! "$@" >/dev/null 2>&1; then
    missing+=("$pkg")
  fi
}
have() { command -v "$1"; }

need cmake          have cmake
need pkg-config     have pkg-config
need build-essential have cc
need build-essential have make
# Check (libcheck) for the tests; its .pc file needs libsubunit's.
need check          pkg-config --exists check
need gnuplot-nox    have gnuplot
need wamerican      test -r /usr/share/dict/words
# the text examples/gpt trains on by default
need fortunes       test -r /usr/share/games/fortunes/fortunes

for extra in "$@"; do
  case $extra in
    valgrind) need valgrind have valgrind ;;
    clang)
      need clang have clang
      # libFuzzer and the sanitizer runtimes for clang.
      need libclang-rt-14-dev sh -c 'ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a'
      ;;
    clang-format) need clang-format have clang-format ;;
    # for make bench: OpenBLAS (also the BLAS behind Debian's PyTorch)
    openblas) need libopenblas0-pthread sh -c 'ls /usr/lib/*/openblas-pthread/libblas.so.3' ;;
    *) echo "deps.sh: unknown extra '$extra'" >&2; exit 2 ;;
  esac
done

# Unique, in order.
pkgs=()
for p in "${missing[@]+"${missing[@]}"}"; do
  case " ${pkgs[*]+"${pkgs[*]}"} " in *" $p "*) ;; *) pkgs+=("$p") ;; esac
done

if [ ${#pkgs[@]} -eq 0 ]; then
  exit 0
fi

echo "tapegrad needs: ${pkgs[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "Run this, then try again:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: no apt-get here; install the packages above (Debian names) by hand" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "== apt-get install -y ${pkgs[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${pkgs[@]}"
