#!/usr/bin/env bash
# Fuzzes the checkpoint loader (tests/fuzz/fuzz_load.c) with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer for a bounded time.
#
#   scripts/fuzz.sh            # 60 seconds
#   FUZZ_SECONDS=600 scripts/fuzz.sh
#
# Environment:
#   FUZZ_SECONDS   run time in seconds (default 60)
#   FUZZ_BUILD     build folder (default build-fuzz/ in the repository)
#   FUZZ_JOBS      parallel build jobs (default: nproc)
#   CC_FUZZ        the clang to use (default: clang)
#
# The library and the target are built with clang through CMake
# (-DTG_FUZZ=ON, which links -fsanitize=fuzzer and adds address,undefined;
# -fsanitize=fuzzer-no-link here gives the library coverage instrumentation
# so the fuzzer can see into the loader). The run starts from a copy of the
# seed corpus tests/fuzz/corpus/, with the header's vocabulary in
# tests/fuzz/fuzz_load.dict (new inputs go to the copy, never into the
# repository). Any crash, sanitizer report, leak, timeout or out-of-memory
# makes libFuzzer write the input to $FUZZ_BUILD/artifacts/ and this script
# exit non-zero.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
cc=${CC_FUZZ:-clang}

die() { echo "fuzz.sh: $*" >&2; exit 1; }

if ! [[ "$seconds" =~ ^[0-9]+$ ]] || (( seconds == 0 )); then
    die "FUZZ_SECONDS must be a positive integer, not '$seconds'"
fi
command -v "$cc" >/dev/null 2>&1 ||
    die "'$cc' not found: the fuzzer needs clang with libFuzzer. Install it with:
    sudo apt-get install clang libclang-rt-dev    (Debian 12: libclang-rt-14-dev)"
command -v cmake >/dev/null 2>&1 || die "cmake not found (sudo apt-get install cmake)"

# libFuzzer's runtime ships separately from clang on Debian: check it links.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$probe/p.c"
"$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1 ||
    die "$cc cannot build a libFuzzer program (is libclang-rt-dev / libclang-rt-14-dev installed?):
$(cat "$probe/log")"

echo "fuzz.sh: building fuzz_load with $cc in $build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTG_FUZZ=ON -DTG_SANITIZE=address,undefined -DBUILD_TESTING=OFF -DTG_OPENMP=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" >"$build.cmake.log" 2>&1 ||
    { cat "$build.cmake.log" >&2; die "cmake configure failed"; }
rm -f "$build.cmake.log"
cmake --build "$build" --target fuzz_load -j "$jobs"
target="$build/fuzz/fuzz_load"
[[ -x "$target" ]] || die "the build did not produce $target"

# Work on a copy of the seeds; artifacts (crashing inputs) beside it.
corpus="$build/corpus"
artifacts="$build/artifacts"
rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
cp "$root"/tests/fuzz/corpus/* "$corpus"/
rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*

echo "fuzz.sh: fuzzing for ${seconds}s from $(find "$corpus" -type f | wc -l) seeds"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
status=0
"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict="$root/tests/fuzz/fuzz_load.dict" -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" || status=$?

found=$(find "$artifacts" -type f | wc -l)
if (( status != 0 || found > 0 )); then
    echo "fuzz.sh: FAILED (exit status $status); inputs that broke the loader:" >&2
    ls -l "$artifacts" >&2 || true
    echo "Reproduce one with: $target $artifacts/<file>" >&2
    exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"
