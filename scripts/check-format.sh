#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fails, naming each file and line, if a tracked C++ file differs from .clang-format
# (clang-format 14). The BPF programs (bpf/) follow the kernel's style instead. Fix with:
#   git ls-files '*.cc' '*.h' | grep -v '^bpf/' | xargs clang-format -i
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "not a git checkout: nothing to list" >&2
  exit 77  # ctest: skipped
fi
git ls-files -z '*.cc' '*.h' | grep -zv '^bpf/' | xargs -0 clang-format --dry-run -Werror
