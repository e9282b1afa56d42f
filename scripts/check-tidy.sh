#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy 14 (.clang-tidy) over every tracked .cc outside bpf/, and through them over our
# headers, with the compile commands of a clang build (scripts/test.sh --clang: build-clang/,
# built, since sources include generated proto and skeleton headers). Prints one line per
# finding, "file:line:col: message [check]", and fails if there is any. The `tidy` ctest of a
# clang build runs it (docs/testing.md).
#   scripts/check-tidy.sh [--all] [BUILD_DIR] [-- FILE...]
# By default it checks the program's sources (CI: ~4 min at -j2 here); --all adds the tests
# (~8 min). FILEs (relative to the source root) check just those.
set -euo pipefail
all=0
if [[ "${1:-}" == "--all" ]]; then
  all=1
  shift
fi
build=build-clang
if [[ $# -gt 0 && "$1" != "--" ]]; then
  build=$1
  shift
fi
[[ "${1:-}" == "--" ]] && shift
cd "$(dirname "$0")/.."
root=$(pwd)
build=$(realpath "$build")

if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "$build/compile_commands.json missing: configure a clang build (scripts/test.sh --clang)" >&2
  exit 1
fi
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "not a git checkout: nothing to list" >&2
  exit 77  # ctest: skipped
fi
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' | grep -v '^bpf/' |
    if ((all)); then cat; else grep -Ev '(_test\.cc$|^tests/)'; fi)
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One output file per source: parallel clang-tidy processes would interleave their lines. Exit
# status 1 means findings (WarningsAsErrors); anything else (a crash) is reported as a finding.
printf '%s\0' "${files[@]}" |
  xargs -0 -r -n 1 -P "$(nproc)" sh -c '
    log="$3/$(echo "$4" | tr / _).txt"
    clang-tidy-14 -p "$1" --quiet --header-filter="^$2/(agent|tunnel|tests)/" "$4" >"$log" 2>&1
    rc=$?
    if [ "$rc" -gt 1 ]; then
      echo "$2/$4:1:1: error: clang-tidy exited with status $rc [clang-tidy]" >>"$log"
    fi' _ "$build" "$root" "$out"

# The findings in clang-tidy's output FILEs, as "path:line:col: message [check]". A header's
# finding shows once per source that includes it. A source that does not compile shows as a
# clang-diagnostic-error finding, so it fails the check too.
findings_in() {
  cat "$@" | sed 's/\x1b\[[0-9;]*m//g' |
    { grep -E '^/[^:]+:[0-9]+:[0-9]+: (warning|error): .*\[[a-z0-9.,-]+\]$' || true; } |
    sed -e "s|^$root/||" -e 's/,-warnings-as-errors\]$/]/' | sort -t: -k1,1 -k2,2n -k3,3n | uniq
}

findings=$(findings_in "$out"/*.txt)
if [[ -n "$findings" ]]; then
  echo "$findings"
  echo "clang-tidy: $(wc -l <<<"$findings") finding(s) in ${#files[@]} sources" >&2
  exit 1
fi
echo "clang-tidy: ${#files[@]} sources clean" >&2
