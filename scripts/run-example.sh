#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: installs, builds and runs sluice-agent on examples/ with two
# local backends, shows what it programmed, then serves until Ctrl-C, which removes
# everything this script and the agent created.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh --build-only
command -v python3 >/dev/null || apt-get install -y -qq python3 >/dev/null
cmake -S . -B build -G Ninja >/dev/null
cmake --build build --target sluice-agent

work=$(mktemp -d /tmp/sluice-example-XXXXXX)
pids=()
# Socket-level balancing for this script's processes only: a child cgroup of the cgroup v2
# root that this shell (so the agent, the backends and the curls below) joins. The agent
# attaches there, not to the root, and pins nothing (--bpf-root=), so nothing outlives it.
cg_root=$(findmnt -t cgroup2 -n -o TARGET | head -n1)
cg="" cg_home=""
if [[ -n $cg_root ]] && mkdir "$cg_root/sluice-example-$$" 2>/dev/null; then
  cg="$cg_root/sluice-example-$$"
  cg_home="$cg_root$(sed -n 's/^0:://p' /proc/self/cgroup)"
  echo $$ >"$cg/cgroup.procs"
fi
cleanup() {
  trap - EXIT INT TERM
  [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  # Puts back the ARP sysctls the agent raised (--strict-arp) from the record in $work/state.
  ./build/agent/sluice-agent --cleanup --bpf-root= --state-dir="$work/state" >/dev/null 2>&1 || true
  rm -rf "$work"
  if [[ -n $cg ]]; then
    echo $$ >"$cg_home/cgroup.procs" 2>/dev/null || echo $$ >"$cg_root/cgroup.procs"
    for _ in $(seq 50); do  # exited children leave the cgroup once reaped
      rmdir "$cg" 2>/dev/null && break
      sleep 0.1
    done
  fi
  echo "example stopped; backends, agent, cgroup, temp files and ARP sysctl changes removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two "pods": HTTP on 127.0.0.2:8080 and 127.0.0.3:8080 (all of 127/8 is local on lo).
for i in 2 3; do
  mkdir -p "$work/pod$i"
  echo "hello from backend 127.0.0.$i" >"$work/pod$i/index.html"
  python3 -m http.server --bind "127.0.0.$i" --directory "$work/pod$i" 8080 >/dev/null 2>&1 &
  pids+=($!)
  python3 - "127.0.0.$i" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 5300))
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(b"udp echo from " + sys.argv[1].encode() + b": " + data, peer)
PY

  pids+=($!)
done

if [[ -n $cg ]]; then
  socket_lb=(--socket-lb=auto "--socket-lb-cgroup=$cg" --bpf-root=)
else
  socket_lb=(--socket-lb=off --bpf-root=)
fi
# The eBPF NAT of remote clients would attach to this machine's network devices.
socket_lb+=(--external-datapath=proxy)
# --allow-loopback: the "pods" listen on 127.0.0.x, which the API server (and so
# sluice, by default) refuses as endpoint addresses.
./build/agent/sluice-agent --source=file:examples/ --hostname-override=local \
  --allow-loopback --state-dir="$work/state" \
  --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 \
  "${socket_lb[@]}" &
agent=$!
pids+=("$agent")

for _ in $(seq 100); do
  curl -fs http://127.0.0.1:10256/healthz >/dev/null 2>&1 && break
  kill -0 "$agent" 2>/dev/null || { echo "sluice-agent exited" >&2; exit 1; }
  sleep 0.1
done
echo
echo "== /healthz";         curl -s http://127.0.0.1:10256/healthz; echo
echo "== /proxyMode";       curl -s http://127.0.0.1:10249/proxyMode; echo
echo "== /debug/services";  curl -s http://127.0.0.1:10249/debug/services
echo "== four requests to the service VIP http://10.96.0.10/"
for _ in 1 2 3 4; do curl -s --max-time 2 http://10.96.0.10/ || echo "(request failed)"; done
echo "== one datagram to the UDP port 10.96.0.10:5300"
python3 - <<'PY' || echo "(no UDP reply)"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.connect(("10.96.0.10", 5300))
s.send(b"hello")
print(s.recv(65535).decode())
PY

echo "== who carried them: socket-level balancing (straight to a backend) or the proxy"
curl -s http://127.0.0.1:10249/metrics |
  grep -E '^(sluice_socket_lb_translations_total|sluice_connections_total|sluice_udp_flows_total)' || true

echo
echo "sluice-agent is running (edit examples/*.yaml to see it follow); Ctrl-C stops and cleans up."
wait "$agent"
