#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer binaries in build-clang/ (scripts/configure.sh clang: ASan+UBSan,
# -DSLUICE_FUZZ=ON; in CI `scripts/test.sh --clang` has built them already) and runs
# each for a fixed time on a temporary copy of tests/fuzz/corpus/<name>/ and regressions/<name>/
# (the tree is never written). Fails on any crash, sanitizer report, leak, timeout or
# out-of-memory, and prints the saved input's path (under build-clang/fuzz-artifacts/).
#   scripts/fuzz.sh                      every fuzzer for 45 s, one per CPU at a time
#   scripts/fuzz.sh -t 600 manifest      one fuzzer for 10 minutes
# Fixing a finding: add the input to tests/fuzz/regressions/<name>/; every build's ctest then
# replays it (fuzz_replay_<name>).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=45
while getopts "t:" opt; do
  case "$opt" in
    t) seconds=$OPTARG ;;
    *) echo "usage: $0 [-t seconds-per-fuzzer] [fuzzer...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
names=("$@")
if ((${#names[@]} == 0)); then
  for f in tests/fuzz/*_fuzzer.cc; do
    f=${f##*/}
    names+=("${f%_fuzzer.cc}")
  done
fi

./scripts/install-deps.sh --build-only
dir=$(./scripts/configure.sh clang)
cmake --build "$dir" -j "$(nproc)" --target "${names[@]/%/_fuzzer}"

# One fuzzer; its log and exit status go to $work.
run_one() {
  local name=$1 corpus=$work/$1 artifacts=$PWD/$dir/fuzz-artifacts/$1/
  mkdir -p "$corpus" "$artifacts"
  cp -r "tests/fuzz/corpus/$name/." "$corpus"
  if [[ -d tests/fuzz/regressions/$name ]]; then
    cp -r "tests/fuzz/regressions/$name/." "$corpus"
  fi
  # -timeout: one input taking this long is a hang (inputs take milliseconds; the margin is for
  # a busy machine). It is short so that a hang which also allocates is reported as a timeout,
  # with its input, before it reaches -rss_limit_mb: libFuzzer's out-of-memory report first
  # walks the whole heap, which took over 14 minutes for 2 GB of small blocks (yaml-cpp#1040).
  # The outer timeout bounds the phase whatever happens.
  local cmd=("$dir/tests/fuzz/${name}_fuzzer" -max_total_time="$seconds" -timeout=10
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus")
  echo "${cmd[*]}" >"$work/$name.cmd"
  local rc=0
  timeout -s KILL $((seconds + 180)) "${cmd[@]}" >"$work/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name.rc"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One fuzzer per core at a time: each is single-threaded.
for name in "${names[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do
    wait -n || true
  done
  run_one "$name" &
done
wait
failed=()
for name in "${names[@]}"; do
  log=$work/$name.log
  if [[ $(cat "$work/$name.rc") == 0 ]]; then
    rate=$(awk '/^stat::average_exec_per_sec/ {print $2}' "$log")
    echo "fuzz $name: ok, ${rate} exec/s, $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
  else
    tail -n 60 "$log"
    echo "fuzz $name: FAILED: $(cat "$work/$name.cmd")"
    grep -E 'Test unit written to' "$log" | sed "s/^.*written to /fuzz $name: input saved to /" || true
    failed+=("$name")
  fi
done
if ((${#failed[@]} > 0)); then
  echo "fuzz: failed: ${failed[*]}" >&2
  exit 1
fi
