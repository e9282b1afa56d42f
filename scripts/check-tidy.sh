#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs clang-tidy 14 (.clang-tidy) over every tracked .cc outside bpf/, and through them over our
# headers, with the compile commands of a clang build (scripts/test.sh --clang: build-clang/,
# built, since sources include generated proto and skeleton headers). Prints one line per
# finding, "file:line:col: message [check]", and fails if there is any. The `tidy` ctest of a
# clang build runs it (docs/testing.md).
#   scripts/check-tidy.sh [--all] [BUILD_DIR] [-- FILE...]
# --all also reports the directories in PENDING; FILEs are always reported in full. Relative
# paths are from the source root.
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

# Being rewritten on other branches: remove each once it has merged with its findings fixed.
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
# Cache: a source that was clean is not checked again while its inputs stay the same. The key
# hashes clang-tidy's version, .clang-tidy, the mode, the compile command and the contents of
# the source and of every file its object depends on (the build's ninja deps log; files outside
# the tree by path, size and mtime). A source not built yet has no key and is always checked.
cache="$build/tidy-cache"
mkdir -p "$cache"
find "$cache" -type f -mtime +30 -delete
printf '%s\n' "${files[@]}" >"$out/files"
python3 - "$build" "$root" "$all" "$out/files" >"$out/keys" <<'PY'
import hashlib, json, os, re, subprocess, sys
build, root, mode, listing = sys.argv[1:]
files = [l.rstrip("\n") for l in open(listing)]
seen = {}
def digest(path):
    if path not in seen:
        try:
            if path.startswith(root + "/"):
                seen[path] = hashlib.sha256(open(path, "rb").read()).hexdigest()
            else:
                st = os.stat(path)
                seen[path] = f"{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            seen[path] = "missing"
    return seen[path]
common = hashlib.sha256()
common.update(subprocess.run(["clang-tidy-14", "--version"], capture_output=True).stdout)
common.update(open(os.path.join(root, ".clang-tidy"), "rb").read() + mode.encode())
commands = {}
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    m = re.search(r" -o (\S+)", e["command"])
    if m:
        commands[os.path.relpath(e["file"], root)] = (os.path.join(e["directory"], m.group(1)),
                                                     e["command"])
deps, target = {}, None
log = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True).stdout
for line in log.splitlines():
    if line and not line[0].isspace():
        target = os.path.normpath(os.path.join(build, line.split(":")[0]))
        deps[target] = [] if "(VALID)" in line else None
    elif line.strip() and target and deps[target] is not None:
        deps[target].append(os.path.normpath(os.path.join(build, line.strip())))
for f in files:
    obj, command = commands.get(f, (None, None))
    inputs = deps.get(os.path.normpath(obj)) if obj else None
    if not inputs:
        print("-", f)
        continue
    h = common.copy()
    h.update(command.encode())
    for path in [os.path.join(root, f)] + sorted(inputs):
        h.update(f"{path}={digest(path)}\n".encode())
    print(h.hexdigest(), f)
PY
# One output file per source: parallel clang-tidy processes would interleave their lines. Exit
# status 1 means findings (WarningsAsErrors); anything else (a crash) is reported as a finding.
while read -r key file; do
  if [[ "$key" != - && -e "$cache/$key" ]]; then
    touch "$cache/$key"
  else
    printf '%s\0%s\0' "$key" "$file"
  fi
done <"$out/keys" |
  xargs -0 -r -n 2 -P "$(nproc)" sh -c '
    log="$3/$(echo "$5" | tr / _).txt"
    clang-tidy-14 -p "$1" --quiet --header-filter="^$2/(agent|tunnel|tests)/" "$5" >"$log" 2>&1
    rc=$?
    if [ "$rc" -gt 1 ]; then
      echo "$2/$5:1:1: error: clang-tidy exited with status $rc [clang-tidy]" >>"$log"
    fi
    echo "$4" >"$log.key"' _ "$build" "$root" "$out"

# The findings in clang-tidy's output FILEs, as "path:line:col: message [check]". A header's
# finding shows once per source that includes it. A source that does not compile shows as a
# clang-diagnostic-error finding, so it fails the check too.
findings_in() {
  cat "$@" | sed 's/\x1b\[[0-9;]*m//g' |
    { grep -E '^/[^:]+:[0-9]+:[0-9]+: (warning|error): .*\[[a-z0-9.,-]+\]$' || true; } |
    sed -e "s|^$root/||" -e 's/,-warnings-as-errors\]$/]/' | sort -t: -k1,1 -k2,2n -k3,3n | uniq |
    if ((all)); then cat; else { grep -Ev "$PENDING" || true; }; fi
}

checked=0
for log in "$out"/*.txt; do
  [[ -e "$log" ]] || continue
  checked=$((checked + 1))
  key=$(cat "$log.key")
  if [[ "$key" != - && -z "$(findings_in "$log")" ]]; then
    touch "$cache/$key"
  fi
done
findings=$(if ((checked)); then findings_in "$out"/*.txt; fi)
summary="${#files[@]} sources ($((${#files[@]} - checked)) unchanged since clean)"
if [[ -n "$findings" ]]; then
  echo "$findings"
  echo "clang-tidy: $(wc -l <<<"$findings") finding(s) in $summary" >&2
  exit 1
fi
echo "clang-tidy: $summary clean" >&2
