#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The TCP data paths in one interleaved run of the shared harness (../shared/bench/bench.sh, or
# $SLUICE_BENCH_HARNESS): sluice on the sockmap fast path, sluice on splice, HAProxy and a direct
# connection; then the machine's total CPU per GB of bulk transfer, which, unlike the harness's
# proxy CPU, includes the kernel worker threads the sockmap path moves its cost to:
#   (machine busy % x CPUs - other tenants' cores) x wall time / GB received.
# Arguments go to the harness (e.g. --quick, --topo loopback, --reps 7). Needs root and a build
# (SLUICE_AGENT, default build/agent/sluice-agent).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
harness=${SLUICE_BENCH_HARNESS:-$here/../../shared/bench/bench.sh}
[[ -x $harness ]] || { echo "bench harness not found at $harness" >&2; exit 2; }
for pkg in haproxy iperf3 jq; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    { echo "missing package $pkg (bench/compare.sh installs the harness's set)" >&2; exit 2; }
done

proxy="$here/sluice-proxy.sh"
args="{LISTEN_ADDR} {LISTEN_PORT} {BACKEND_ADDR} {BACKEND_PORT} {THREADS} {WORKDIR}"
out=${SLUICE_BENCH_OUT:-$(mktemp -d /tmp/sluice-datapath-bench.XXXXXX)}
args_=("$@")
for ((i = 0; i < ${#args_[@]} - 1; i++)); do  # a caller's --out wins (the harness takes the last)
  [[ ${args_[i]} == --out ]] && out=${args_[i + 1]}
done
"$harness" --proxies none,haproxy --out "$out" \
  --proxy "sluice-sockmap=$proxy tcp $args sockmap" \
  --proxy "sluice-splice=$proxy tcp $args splice" "$@"

samples=$out/samples.jsonl
ncpu=$(jq -r 'select(.type == "meta") | .ncpu' "$samples" | head -1)
echo
echo "Total machine CPU-s per GB received (median over repetitions; $ncpu CPUs; results in $out)"
jq -rs --argjson ncpu "${ncpu:-$(nproc)}" '
  [.[] | select(.type == "sample" and .ok == true and (.test == "tcp1" or .test == "tcp4")
               and .bytes > 0)
   | {topo, config, test,
      v: (((.machine_cpu_pct / 100) * $ncpu - (.foreign_cores // 0)) * .wall_s
          / (.bytes / 1e9))}]
  | group_by([.topo, .test, .config])[]
  | (map(.v) | sort) as $v
  | "\(.[0].topo)\t\(.[0].test)\t\(.[0].config)\t\($v[(($v | length) / 2 | floor)] * 1000 | round / 1000)"
' "$samples" | sort | column -t
