#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures the build directory of one mode and prints its path: the one place each mode's
# CMake flags are written, so scripts/test.sh and scripts/fuzz.sh share build-clang/.
#   scripts/configure.sh [default|asan|tsan|clang]
# clang: clang++ -Werror, ASan+UBSan, and -DSLUICE_FUZZ=ON, so the same build holds the test
# binaries (with coverage instrumentation, which the sanitizer runtime's no-op hooks absorb) and
# the libFuzzer binaries; a separate fuzz build compiled most of the tree a third time in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
case "${1:-default}" in
  default) ;;
  asan)  dir=build-asan;  args+=(-DSLUICE_ASAN=ON) ;;
  tsan)  dir=build-tsan;  args+=(-DSLUICE_TSAN=ON) ;;
  clang) dir=build-clang; args+=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang
                                 -DSLUICE_FUZZ=ON
                                 -DCMAKE_EXPORT_COMPILE_COMMANDS=ON) ;;  # the tidy test
  *) echo "usage: $0 [default|asan|tsan|clang]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${args[@]}" >/dev/null
echo "$dir"
