#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy 14 (.clang-tidy) over every tracked .cc outside bpf/, and through them over our
# headers, with the compile commands of a clang build (scripts/test.sh --clang: build-clang/,
# which must be built, since the sources include generated proto and skeleton headers). Prints
# one line per finding, "file:line:col: message [check]", and fails if there is any.
#   scripts/check-tidy.sh [--all] [BUILD_DIR] [-- FILE...]
# --all also checks the directories under rewrite listed in PENDING below (their findings are
# known and fixed after those branches merge). The `tidy` ctest of a clang build runs it.
set -euo pipefail
all=0
if [[ "${1:-}" == "--all" ]]; then
  all=1
  shift
fi
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build-clang}")
[[ $# -gt 0 ]] && shift
[[ "${1:-}" == "--" ]] && shift
root=$(pwd)

# TODO(sluice): drop each entry once its rewrite has merged and its findings are fixed.
PENDING='^(tunnel/|agent/event/|agent/proxy/|agent/fastpath/|agent/proxier/sync_runner)'

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
  all=1  # named files are reported in full, PENDING or not
else
  mapfile -t files < <(git ls-files '*.cc' | grep -v '^bpf/' |
    if ((all)); then cat; else grep -Ev "$PENDING"; fi)
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One output file per source: parallel clang-tidy processes would interleave their lines. Exit
# status 1 means findings (WarningsAsErrors); anything else (a crash) is reported as a finding.
printf '%s\0' "${files[@]}" |
  xargs -0 -P "$(nproc)" -I{} sh -c '
    log="$4/$(echo "$3" | tr / _).txt"
    clang-tidy-14 -p "$1" --quiet --header-filter="^$2/(agent|tunnel|tests)/" "$3" >"$log" 2>&1
    rc=$?
    if [ "$rc" -gt 1 ]; then
      echo "$2/$3:1:1: error: clang-tidy exited with status $rc [clang-tidy]" >>"$log"
    fi' _ "$build" "$root" {} "$out"

# A header's finding shows once per source that includes it. A source that does not compile
# shows as a clang-diagnostic-error finding, so it fails the check too.
findings=$(cat "$out"/*.txt | sed 's/\x1b\[[0-9;]*m//g' |
  { grep -E '^/[^:]+:[0-9]+:[0-9]+: (warning|error): .*\[[a-z0-9.,-]+\]$' || true; } |
  sed -e "s|^$root/||" -e 's/,-warnings-as-errors\]$/]/' | sort -t: -k1,1 -k2,2n -k3,3n | uniq |
  if ((all)); then cat; else { grep -Ev "$PENDING" || true; }; fi)
if [[ -n "$findings" ]]; then
  echo "$findings"
  echo "clang-tidy: $(wc -l <<<"$findings") finding(s) in ${#files[@]} sources" >&2
  exit 1
fi
echo "clang-tidy: ${#files[@]} sources clean" >&2
