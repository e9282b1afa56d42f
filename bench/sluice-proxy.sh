#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs sluice-agent as a one-service proxy for ../shared/bench/bench.sh:
#   sluice-proxy.sh tcp|udp LISTEN_ADDR LISTEN_PORT BACKEND_ADDR BACKEND_PORT WORKERS WORKDIR \
#                   [MODE [CLIENT_CGROUP]]
# MODE (or $SLUICE_DATAPATH) is auto (default), splice or sockmap: the --datapath of the proxy,
# with socket-level balancing off. MODE socket-lb adds --socket-lb=on attached to CLIENT_CGROUP
# (the harness's {CLIENT_CGROUP}; required, never the cgroup v2 root) with nothing pinned
# (--bpf-root=), so the hooks detach when the agent exits; the proxy (--datapath auto, or
# $SLUICE_DATAPATH) still serves clients outside that cgroup, e.g. the harness's smoke test.
# MODE external serves remote clients with the eBPF NAT (--external-datapath=bpf, refusing to
# start without it) on the device holding LISTEN_ADDR, the service's externalIP too, with the
# backend an endpoint on this node; socket LB off, the proxy ($SLUICE_DATAPATH or auto) for the
# rest. It needs the harness's netns topology: on loopback no device carries remote clients.
# The service's ClusterIP is LISTEN_ADDR (already local, so no VIP is added) and its one
# endpoint is the backend, on this node ("bench"). Admin servers are off so several instances can run side by side,
# unless $SLUICE_METRICS_DIR is set: the agent then serves /metrics on a free loopback port
# and writes "PORT" to $SLUICE_METRICS_DIR/<proto>-<port>-<mode>.port (for checks by hand).
set -euo pipefail
proto=$1 addr=$2 port=$3 backend=$4 backend_port=$5 workers=$6 work=$7
mode=${8:-${SLUICE_DATAPATH:-auto}}
cgroup=${9:-}
agent=${SLUICE_AGENT:-$(cd "$(dirname "$0")/.." && pwd)/build/agent/sluice-agent}
dir="$work/sluice-$proto-$port-$mode"
mkdir -p "$dir"
family=IPv4
[[ $addr == *:* ]] && family=IPv6
P=${proto^^}
external=
[[ $mode == external ]] && external="
  externalIPs: [\"$addr\"]"
cat >"$dir/svc.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: bench}
spec:
  clusterIP: "$addr"$external
  ports: [{name: p, protocol: $P, port: $port}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bench-1, namespace: bench, labels: {kubernetes.io/service-name: bench}}
addressType: $family
endpoints: [{addresses: ["$backend"], nodeName: bench}]
ports: [{name: p, protocol: $P, port: $backend_port}]
YAML
# Without --socket-lb=off the agent's default (auto, the cgroup v2 root, pinned under
# /sys/fs/bpf/sluice) would translate every process on the machine; the eBPF NAT of remote
# clients is mode external's alone.
lb=(--socket-lb=off --bpf-root= --external-datapath=proxy)
datapath=$mode
if [[ $mode == socket-lb ]]; then
  [[ -n $cgroup && -f $cgroup/cgroup.procs ]] ||
    { echo "sluice-proxy.sh: socket-lb needs a cgroup v2 directory (got '$cgroup')" >&2; exit 2; }
  [[ $(stat -c %i "$cgroup") != 1 ]] ||
    { echo "sluice-proxy.sh: refusing to attach to the cgroup v2 root $cgroup" >&2; exit 2; }
  lb=(--socket-lb=on "--socket-lb-cgroup=$cgroup" --bpf-root=)
  datapath=${SLUICE_DATAPATH:-auto}
elif [[ $mode == external ]]; then
  # Only the client side: the backend's device carries no remote client, as kube-proxy's
  # DNAT in PREROUTING does nothing there either.
  dev=$(ip -o addr show to "$addr" | awk '{print $2; exit}')
  [[ -n $dev && $dev != lo ]] ||
    { echo "sluice-proxy.sh: external needs a device other than lo holding $addr (netns topology)" >&2; exit 2; }
  # The connection test closes with an RST, after which the NAT keeps a flow 10 s (as
  # nf_conntrack_tcp_timeout_close does for nft-dnat): the table is doubled to hold ~26k
  # conn/s of that (13k at the default), above what the harness reaches.
  lb=(--socket-lb=off --bpf-root= --external-datapath=bpf "--external-devices=$dev"
    --external-max-flows=524288)
  datapath=${SLUICE_DATAPATH:-auto}
fi
metrics=--metrics-bind-address=
if [[ -n ${SLUICE_METRICS_DIR:-} ]]; then
  mport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "$mport" >"$SLUICE_METRICS_DIR/$proto-$port-$mode.port"
  metrics=--metrics-bind-address=127.0.0.1:$mport
fi
# The bench's backend listens on loopback, which sluice refuses as an endpoint without the flag.
# $SLUICE_AGENT_FLAGS: more flags, e.g. --reuseport-sockets=0 for one shared listening socket.
# shellcheck disable=SC2086
exec "$agent" --source="file:$dir" --allow-loopback --hostname-override=bench \
  --healthz-bind-address= "$metrics" \
  --workers="$workers" --datapath="$datapath" "${lb[@]}" ${SLUICE_AGENT_FLAGS:-}
