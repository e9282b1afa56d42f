#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Measures sluice's data path against a direct connection, HAProxy, nginx and socat in one
# interleaved run of the shared harness (../shared/bench/bench.sh, or $SLUICE_BENCH_HARNESS).
# Arguments go to the harness (e.g. --quick, --topo netns, --reps 7). Needs root and a build in
# build/ (scripts/test.sh or cmake --build build). Results land in the harness's results dir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
harness=${SLUICE_BENCH_HARNESS:-$here/../../shared/bench/bench.sh}
[[ -x $harness ]] || { echo "bench harness not found at $harness" >&2; exit 2; }

missing=()
for pkg in haproxy nginx libnginx-mod-stream socat iperf3 wrk jq strace ethtool gcc; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# The distribution's nginx service is not needed (the harness runs its own instances).
systemctl disable --now nginx >/dev/null 2>&1 || true

proxy="$here/sluice-proxy.sh"
args="{LISTEN_ADDR} {LISTEN_PORT} {BACKEND_ADDR} {BACKEND_PORT} {THREADS} {WORKDIR}"
# sluice twice: the sockmap fast path and the splice path (--datapath).
exec "$harness" --proxies none,haproxy,nginx,socat \
  --proxy "sluice-sockmap=$proxy tcp $args sockmap" --proxy-udp "sluice-sockmap=$proxy udp $args sockmap" \
  --proxy "sluice-splice=$proxy tcp $args splice" --proxy-udp "sluice-splice=$proxy udp $args splice" \
  "$@"
