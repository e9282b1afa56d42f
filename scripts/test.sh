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
#                             compiler's checks and the sanitizers, so CI builds the tree twice,
#                             not three times.
# Extra arguments after the mode go to ctest (e.g. -R Mux -V).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
case "${1:-}" in
  --asan|--tsan|--clang) mode=${1#--}; shift ;;
esac

./scripts/install-deps.sh

dir=build
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
case "$mode" in
  asan)  dir=build-asan;  cmake_args+=(-DSLUICE_ASAN=ON) ;;
  tsan)  dir=build-tsan;  cmake_args+=(-DSLUICE_TSAN=ON) ;;
  clang) dir=build-clang; cmake_args+=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
                                       -DSLUICE_ASAN=ON
                                       -DCMAKE_EXPORT_COMPILE_COMMANDS=ON) ;;  # the tidy test
esac

cmake -S . -B "$dir" "${cmake_args[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)"
# Sanitizer reports fail the test that triggers them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir" --output-on-failure --timeout 600 -j "$(nproc)" "$@"
