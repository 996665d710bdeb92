#!/usr/bin/env bash
# ctest `install_package`: installs the build into a temporary prefix, then
# builds tests/install/hello.c against it twice — with find_package(tapegrad)
# and with pkg-config — and runs both programs; then builds and runs the
# worked example that opens include/tapegrad.h, as printed there.
# Usage: run.sh BUILD_DIR WORK_DIR CMAKE CC LIBDIR [SANITIZE]
set -euo pipefail
build=$1 work=$2 cmake=$3 cc=$4 libdir=$5 sanitize=${6:-}
here=$(cd "$(dirname "$0")" && pwd)

# A sanitized library needs its users linked with the same runtime.
extra=()
if [ -n "$sanitize" ]; then
  extra=("-fsanitize=$sanitize" -fno-omit-frame-pointer)
fi

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

echo "== cmake --install into $prefix"
"$cmake" --install "$build" --prefix "$prefix"

echo "== find_package(tapegrad)"
"$cmake" -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="${extra[*]}" -DCMAKE_BUILD_TYPE=Debug
"$cmake" --build "$work/cmake-build"
"$work/cmake-build/hello"

echo "== pkg-config tapegrad"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
pkg-config --exists --print-errors tapegrad
echo "pkg-config --cflags --libs tapegrad: $(pkg-config --cflags --libs tapegrad)"
# shellcheck disable=SC2046  # word splitting of pkg-config output is intended
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror "${extra[@]}" "$here/hello.c" -o "$work/hello-pc" \
  $(pkg-config --cflags --libs tapegrad)
# A shared libtapegrad is found at run time through the loader's path.
LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/hello-pc"

echo "== the worked example at the top of tapegrad.h"
# The code lines (" *   ...") between "A worked example" and "Life cycle",
# wrapped in main(); it prints to stderr only when a call failed.
sed -n '/^ \* A worked example/,/^ \* Life cycle/p' "$prefix/include/tapegrad.h" \
  | sed -n 's/^ \*   //p' > "$work/example_body.c"
[ -s "$work/example_body.c" ] || { echo "no worked example found in tapegrad.h"; exit 1; }
{
  echo '#include <stdio.h>'
  echo '#include <tapegrad.h>'
  echo 'int main(void) {'
  cat "$work/example_body.c"
  echo '    return 0;'
  echo '}'
} > "$work/header_example.c"
# shellcheck disable=SC2046
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror "${extra[@]}" "$work/header_example.c" -o "$work/header_example" \
  $(pkg-config --cflags --libs tapegrad)
LD_LIBRARY_PATH="$prefix/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/header_example" 2> "$work/example.err"
if [ -s "$work/example.err" ]; then
  echo "the header's worked example failed:"; cat "$work/example.err"; exit 1
fi

echo "install_package: both builds and the header's worked example ran"
