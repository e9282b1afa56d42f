#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs sluice-agent as a one-service proxy for ../shared/bench/bench.sh:
#   sluice-proxy.sh tcp|udp LISTEN_ADDR LISTEN_PORT BACKEND_ADDR BACKEND_PORT WORKERS WORKDIR [DATAPATH]
# DATAPATH (or $SLUICE_DATAPATH) is --datapath: auto (default), splice or sockmap.
# The service's ClusterIP is LISTEN_ADDR (already local, so no VIP is added) and its one
# endpoint is the backend. Admin servers are off so several instances can run side by side.
set -euo pipefail
proto=$1 addr=$2 port=$3 backend=$4 backend_port=$5 workers=$6 work=$7
datapath=${8:-${SLUICE_DATAPATH:-auto}}
agent=${SLUICE_AGENT:-$(cd "$(dirname "$0")/.." && pwd)/build/agent/sluice-agent}
dir="$work/sluice-$proto-$port-$datapath"
mkdir -p "$dir"
family=IPv4
[[ $addr == *:* ]] && family=IPv6
P=${proto^^}
cat >"$dir/svc.yaml" <<YAML
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: bench}
spec:
  clusterIP: "$addr"
  ports: [{name: p, protocol: $P, port: $port}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bench-1, namespace: bench, labels: {kubernetes.io/service-name: bench}}
addressType: $family
endpoints: [{addresses: ["$backend"]}]
ports: [{name: p, protocol: $P, port: $backend_port}]
YAML
exec "$agent" --source="file:$dir" --healthz-bind-address= --metrics-bind-address= \
  --workers="$workers" --datapath="$datapath"
