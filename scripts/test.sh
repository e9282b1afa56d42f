#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what the build and tests need, builds, and runs every test with ctest.
#   scripts/test.sh           g++ build in build/
#   scripts/test.sh --asan    g++ AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
#   scripts/test.sh --tsan    g++ ThreadSanitizer build in build-tsan/ (Debian's abseil is not
#                             instrumented: accesses guarded by absl::Mutex show as races)
#   scripts/test.sh --clang   clang++ -Werror build with ASan+UBSan in build-clang/ (abseil's
#                             must-use-Status checks and -Wthread-safety only fire under clang),
#                             plus the `tidy` test (scripts/check-tidy.sh). One build serves the
#                             compiler's checks, the sanitizers and the fuzzers (scripts/fuzz.sh),
#                             so CI builds the tree twice, not three times.
# Each mode's CMake flags: scripts/configure.sh.
# Extra arguments after the mode go to ctest (e.g. -R Mux -V).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
case "${1:-}" in
  --asan|--tsan|--clang) mode=${1#--}; shift ;;
esac

./scripts/install-deps.sh

dir=$(./scripts/configure.sh "$mode")
cmake --build "$dir" -j "$(nproc)"
# Sanitizer reports fail the test that triggers them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$(nproc)" "$@"
