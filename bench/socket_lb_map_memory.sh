#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Kernel memory (bpftool's bytes_memlock) of the socket-LB maps as the agent loads them.
#   bench/socket_lb_map_memory.sh build/agent/sluice-agent [AGENT FLAGS...]
#   MANIFEST=services.yaml SETTLE=8 bench/socket_lb_map_memory.sh ...   # programmed first
# The agent runs as root in a private network namespace, attached to a new empty cgroup (no
# process is translated), nothing pinned; its maps are found by the map ids of its fds.
set -e
AGENT=$1; shift
CG=/sys/fs/cgroup/unified/sluice-map-memory-$$
[ -d /sys/fs/cgroup/unified ] || CG=/sys/fs/cgroup/sluice-map-memory-$$
SRC=$(mktemp -d)
[ -n "$MANIFEST" ] && cp "$MANIFEST" $SRC/services.yaml
mkdir $CG
unshare -n sh -c 'ip link set lo up; exec "$@"' sh "$AGENT" --source=file:$SRC \
  --healthz-bind-address= --metrics-bind-address= --socket-lb=on --socket-lb-cgroup=$CG \
  --bpf-root= --datapath=splice --vip-interface=lo "$@" > $SRC.log 2>&1 &
PID=$!
for i in $(seq 1 100); do
  grep -q "socket LB: on" $SRC.log && break
  sleep 0.1
done
sleep ${SETTLE:-0.5}
IDS=$(grep -h "^map_id:" /proc/$PID/fdinfo/* 2>/dev/null | awk '{print $2}' | tr '\n' ' ')
bpftool -j map show | IDS="$IDS" python3 -c '
import json,os,sys
ids={int(i) for i in os.environ["IDS"].split()}
maps=[m for m in json.load(sys.stdin) if m.get("name","").startswith("sluice_lb_") and m["id"] in ids]
tot=0
for m in sorted(maps,key=lambda m:m["name"]):
    print("%-18s %-14s max_entries %8d memlock %10d" % (m["name"], m["type"], m.get("max_entries",0), m.get("bytes_memlock",0)))
    tot+=m.get("bytes_memlock",0)
print("total memlock %d bytes = %.1f MiB" % (tot, tot/1048576))'
kill $PID; wait $PID || true
rmdir $CG; rm -rf $SRC $SRC.log
