#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Measures sluice's data paths against a direct connection, HAProxy, nginx, socat and kernel NAT
# (nftables DNAT, kube-proxy nftables mode's data path) in one interleaved run of the shared
# harness (../shared/bench/bench.sh, or $SLUICE_BENCH_HARNESS). sluice runs four ways: the
# sockmap fast path, the splice path, socket-level balancing (cgroup connect()/sendmsg()
# hooks attached to the harness's client cgroup, the proxy alongside for the rest), and the
# eBPF NAT of remote clients (tc programs on the node's client-facing device; netns topology
# only, where the listen address is the service's externalIP).
# Arguments go to the harness (e.g. --quick, --topo netns, --reps 7; a later --proxies LIST may
# name sluice-sockmap, sluice-splice, sluice-socketlb, sluice-external). Needs root and a build in build/
# (scripts/test.sh or cmake --build build). Results land in the harness's results dir.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
harness=${SLUICE_BENCH_HARNESS:-$here/../../shared/bench/bench.sh}
[[ -x $harness ]] || { echo "bench harness not found at $harness" >&2; exit 2; }

missing=()
for pkg in haproxy nginx libnginx-mod-stream socat iperf3 wrk jq strace ethtool gcc nftables; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# The distribution's nginx service is not needed (the harness runs its own instances).
systemctl disable --now nginx >/dev/null 2>&1 || true

# The measured clients run in a child cgroup of the cgroup v2 hierarchy, which the harness
# creates and removes; only there do sluice-socketlb's hooks translate (never the root: every
# process on the machine would be). The other configs' clients run there too and pass the
# hooks untranslated (a map miss per connect()). A later --client-cgroup wins.
cg_root=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/self/mounts)
[[ -n $cg_root ]] || { echo "no cgroup v2 mount" >&2; exit 2; }

proxy="$here/sluice-proxy.sh"
args="{LISTEN_ADDR} {LISTEN_PORT} {BACKEND_ADDR} {BACKEND_PORT} {THREADS} {WORKDIR}"
exec "$harness" --proxies none,haproxy,nginx,socat,nft-dnat --client-cgroup "$cg_root/sluice-bench-$$" \
  --proxy "sluice-sockmap=$proxy tcp $args sockmap" --proxy-udp "sluice-sockmap=$proxy udp $args sockmap" \
  --proxy "sluice-splice=$proxy tcp $args splice" --proxy-udp "sluice-splice=$proxy udp $args splice" \
  --proxy "sluice-socketlb=$proxy tcp $args socket-lb {CLIENT_CGROUP}" \
  --proxy-udp "sluice-socketlb=$proxy udp $args socket-lb {CLIENT_CGROUP}" \
  --proxy "sluice-external=$proxy tcp $args external" --proxy-udp "sluice-external=$proxy udp $args external" \
  "$@"
