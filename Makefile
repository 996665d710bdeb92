# Thin wrapper around CMake. The real build is CMakeLists.txt.
#   make demo      install what is missing, build, train, write the plots
#   make test      install what is missing, build, run every test (ctest)
#   make bench     build and run the benchmarks (the data-parallel one too when MPI is built),
#                  then write docs/performance.md from their results (out/bench/*.json)
#   make perf-doc  only write docs/performance.md from the results in out/bench/
#   make sanitize  build with AddressSanitizer + UBSan (build-asan/) and run the tests
#   make memcheck  build-memcheck/ (portable, -O1 -g), every test under valgrind
#   make fuzz      run the checkpoint-loader fuzzer (scripts/fuzz.sh)
#   make format    format the C files with .clang-format; make format-check only checks
#   make clean     remove the build folders and out/
# Extra CMake flags: make test CMAKE_ARGS="-DTG_WERROR=ON"

SHELL    := /bin/bash
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=
BUILD    := build

.PHONY: all deps build test demo bench perf-doc sanitize memcheck fuzz format format-check clean

all: build

deps:
	@scripts/deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	bash scripts/bench.sh $(BUILD)
	python3 scripts/perf_doc.py

perf-doc:
	python3 scripts/perf_doc.py

# Optimized (-O2 -g) but with asserts on (no -DNDEBUG): ASan and UBSan need
# no -O0, and the heavier suites run several times faster than at -O0.
sanitize: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" \
	  -DTG_SANITIZE=address,undefined $(CMAKE_ARGS)
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ctest --test-dir build-asan --output-on-failure -j $(JOBS)

# valgrind cannot decode AVX-512, so this build is portable (TG_NATIVE=OFF);
# -O1 -g with asserts on, as valgrind's manual suggests.
memcheck:
	@scripts/deps.sh valgrind
	cmake -S . -B build-memcheck -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
	  -DTG_NATIVE=OFF $(CMAKE_ARGS)
	cmake --build build-memcheck -j $(JOBS)
	scripts/memcheck.sh build-memcheck

fuzz:
	@scripts/deps.sh clang
	bash scripts/fuzz.sh

format:
	scripts/format.sh

format-check:
	scripts/format.sh --check

clean:
	rm -rf build build-asan build-memcheck build-fuzz out
