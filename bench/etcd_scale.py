#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Scale benchmark of the etcd source (issue 5): 10,000 Services with 100,000 endpoints in total.

Runs a real etcd (data on /dev/shm) and the real sluice-agent in a private network namespace
(the script re-executes itself under `unshare -n`; run it as root), loads the objects through
etcd's JSON gateway, then measures:
  cold start   sluice-agent start -> the first complete sync (every VIP and listener in place),
               from the agent's kubeproxy_sync_proxy_rules_last_timestamp_seconds;
  latency      one endpoint change -> programmed, for --changes single changes one at a time:
               each EndpointSlice carries endpoints.kubernetes.io/last-change-trigger-time, set
               just before its put, so the agent's own kubeproxy_network_programming_duration
               histogram sum grows by exactly that change's latency;
  RSS          VmRSS / VmHWM of the agent after the cold start and after the changes.
Targets: cold start < 2 s, p99 < 50 ms, RSS < 150 MiB. /healthz cannot tell when a sync ended
(kube-proxy's lastUpdated is the current time while healthy), so the script reads the sync
gauge from /metrics: every 100 ms until the first sync, and after each change once the maps
have it and the pause between changes (10-30 ms) has passed (with socket LB on, a scrape reads
a BPF entry per service port: started sooner, it took a CPU from the rest of the sync).

With --socket-lb (issue 10) the agent also balances at the socket (--socket-lb=on) for a child
cgroup of the cgroup v2 hierarchy that the script creates and removes, nothing pinned
(--bpf-root=), and the script reports:
  cold start   sluice-agent start -> the last service port's frontend is in sluice_lb_svc
               (the script looks it up with bpf(2) every 2 ms; the first sync writes service
               ports in name order), and when that sync's socket-LB step ended (its start plus
               sluice_sync_consumer_applied_seconds{consumer="socket-lb"}, which also counts
               the sweep of stale entries after the last write);
  change       per change, sync start -> socket-LB maps programmed (that histogram's sum
               grows by exactly one observation per sync), and etcd put -> the changed
               service's entry in sluice_lb_svc has its new backend set (polled with bpf(2));
  maps         the kernel memory of the sluice_lb_* maps (bpftool's bytes_memlock);
  check        a few connect()s from that cgroup to ClusterIPs are translated (the backends
               are unroutable, so a translated connect fails with ENETUNREACH at once).
  every consumer  per change, sync start -> applied by every consumer (the last one's
               sluice_sync_consumer_applied_seconds, consumer="health-check").
Targets (issue 27): socket-LB cold start < 0.5 s, sync start -> every consumer applied p99
< 2 ms, etcd put -> in the maps p99 < 10 ms.
Without --socket-lb the agent runs with --socket-lb=off.

With --external-nat (issue 25) the agent also runs the eBPF NAT of remote clients
(--external-datapath=bpf) on a veth pair the script creates in its namespace, one end holding
the node address 10.250.0.1 (--external-devices, --nodeport-addresses), nothing pinned. Every
Service gets an external IP (172.20.x.y) and every tenth is also a NodePort (1,000 of them), so
10,000 services are 11,000 NAT frontends; all endpoints are on this node (nodeName is the
agent's --hostname-override), as the NAT serves a port only then. The proxy keeps listening on
every frontend too: 21,000 listeners do not fit a 20,000 RLIMIT_NOFILE, so --max-listeners
leaves some Services to no listener (logged); the NAT programs them all. ClusterIPs are made
local by one route (--service-cluster-ip-range): 20,000 VIPs on lo took the first sync's proxy
step 21-31 s; the 10,000 external IPs still take seconds, hence --sync-period=10m. Reported:
  cold start   sluice-agent start -> every NAT frontend in sluice_nat_svc (bpf(2) lookups:
               the last one written in name order every 2 ms, then all of them), and when the
               first sync's external-nat step ended (sluice_sync_consumer_applied_seconds
               {consumer="external-nat"}; a full sync runs it beside socket LB's step, so
               both count from the sync's start);
  change       per change, sync start -> NAT maps programmed (p50, p99; and the NAT's own
               step: changes run the consumers in turn, socket LB's step first), and etcd
               put -> the changed service's sluice_nat_svc value has its new backend set
               (polled with bpf(2));
  maps         the kernel memory of the sluice_nat_* maps (sluice_nat_ct is preallocated:
               --external-max-flows entries, 36 MiB at the default).
Targets (issue 25): cold start to every NAT frontend < 1 s; sync start -> in the NAT maps
p99 < 5 ms.

  sudo bench/etcd_scale.py [--agent build/agent/sluice-agent] [--services 10000]
                           [--endpoints-per-service 10] [--changes 200] [--workers 1]
                           [--socket-lb] [--external-nat] [--wrap CMD] [--agent-arg=FLAG]
"""
import argparse
import base64
import datetime
import errno
import http.client
import json
import os
import random
import re
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchkit import (BpfMap, ChildCgroup, Metrics, bpf_maps,  # noqa: E402
                      enter_private_netns, exit_on_signals, format_maps, free_port, percentile)

PREFIX = "/sluice/registry"


def b64(text):
    return base64.b64encode(text.encode()).decode()


class Etcd:
    """etcd on 127.0.0.1 with its data on tmpfs; writes go through its JSON gateway."""

    def __init__(self, workdir):
        self.port, peer = free_port(), free_port()
        while peer == self.port:  # the kernel may hand out the same free port twice
            peer = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.log = open(os.path.join(workdir, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            ["etcd", "--name=bench", f"--data-dir={workdir}/etcd",
             f"--listen-client-urls={self.url}", f"--advertise-client-urls={self.url}",
             f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
             f"--initial-cluster=bench={peer_url}", "--logger=zap", "--log-level=warn",
             "--quota-backend-bytes=4294967296"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.conn = None
        deadline = time.time() + 20
        while True:
            try:
                self.call("/v3/kv/range", {"key": b64("/")})
                return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.proc.kill()  # run() never saw this Etcd, so its cleanup cannot
                    self.proc.wait()
                    raise RuntimeError("etcd did not start; see etcd.log")
                self.conn = None
                time.sleep(0.1)

    def call(self, path, body):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.conn.request("POST", path, json.dumps(body))
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"etcd {path}: {response.status} {data[:200]}")
        return json.loads(data)

    def put_many(self, items):
        # etcd's default --max-txn-ops is 128.
        for i in range(0, len(items), 100):
            ops = [{"request_put": {"key": b64(k), "value": b64(v)}} for k, v in items[i:i + 100]]
            self.call("/v3/kv/txn", {"success": ops})

    def put(self, key, value):
        self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


def cluster_ip(i):
    return f"10.96.{i // 250}.{i % 250 + 1}"


# --external-nat: the node address (on a veth in the script's namespace) NodePorts answer on.
NODE_DEVICE = "sl-node0"
NODE_IP = "10.250.0.1"


def external_ip(i):
    return f"172.20.{i // 250}.{i % 250 + 1}"


def node_port(i):
    """Every tenth service is a NodePort (1,000 of 10,000 fit kube-apiserver's range)."""
    return 30000 + i // 10 if i % 10 == 0 and i // 10 <= 2767 else None


def service(i, external=False):
    spec = {"clusterIP": cluster_ip(i), "clusterIPs": [cluster_ip(i)],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}
    if external:
        spec["externalIPs"] = [external_ip(i)]
        if node_port(i) is not None:
            spec["type"] = "NodePort"
            spec["ports"][0]["nodePort"] = node_port(i)
    return json.dumps({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"svc-{i}", "namespace": "bench"},
        "spec": spec}, separators=(",", ":"))


def endpoint_ip(i, j):
    n = i * 64 + j  # 64 addresses per service leave room for changes
    return f"10.{128 + n // 65536}.{n // 256 % 256}.{n % 256}"


def slice_(i, addresses, trigger=None):
    meta = {"name": f"svc-{i}-1", "namespace": "bench",
            "labels": {"kubernetes.io/service-name": f"svc-{i}"}}
    if trigger:
        meta["annotations"] = {"endpoints.kubernetes.io/last-change-trigger-time": trigger}
    return json.dumps({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}, "nodeName": "node1"}
                      for a in addresses],
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]}, separators=(",", ":"))


def rss_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            m = re.match(r"(VmRSS|VmHWM):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2))
    return out


def lb_key(ip, port):
    """A TCP frontend as the key of the sluice_lb_svc map (bpf/include/sluice/bpf_abi.h)."""
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip) + struct.pack("!H", port) + bytes([6, 0])


LB_APPLIED = 'sluice_sync_consumer_applied_seconds_{}{{consumer="socket-lb"}}'
PROXY_APPLIED = 'sluice_sync_consumer_applied_seconds_{}{{consumer="proxy"}}'
# The last consumer of each sync: its observation is sync start -> applied by every consumer.
LAST_APPLIED = 'sluice_sync_consumer_applied_seconds_{}{{consumer="health-check"}}'


NAT_APPLIED = 'sluice_sync_consumer_applied_seconds_{}{{consumer="external-nat"}}'


def nat_keys(n):
    """Every eBPF NAT frontend (sluice_nat_svc keys), the last one the first sync writes first:
    ServiceMaps writes service ports in name order ("bench/svc-999:http" sorts last)."""
    order = sorted(range(n), key=lambda i: f"svc-{i}:")
    keys = []
    for i in order:
        keys.append(lb_key(external_ip(i), 80))
        if node_port(i) is not None:
            keys.append(lb_key(NODE_IP, node_port(i)))
    return keys[::-1]


def make_node_device():
    """A veth pair in the script's namespace, one end holding the node address: the device the
    eBPF NAT attaches to (never one of the host's)."""
    peer = NODE_DEVICE[:-1] + "1"
    for cmd in (["ip", "link", "add", NODE_DEVICE, "type", "veth", "peer", "name", peer],
                ["ip", "addr", "add", f"{NODE_IP}/24", "dev", NODE_DEVICE],
                ["ip", "link", "set", NODE_DEVICE, "up"], ["ip", "link", "set", peer, "up"]):
        subprocess.run(cmd, check=True)


def agent_pid(proc, args):
    """The PID of the agent `proc` runs: itself (--agent may be a script that execs it), or
    under --wrap the wrapper's descendant running --agent (None until it has started)."""
    if not args.wrap:
        return proc.pid
    exe = args.agent
    pids = [proc.pid]
    while pids:
        pid = pids.pop()
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(exe):
                return pid
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                pids.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return None


def status_cpu_seconds(pid):
    """CPU time of the agent's status-server threads (named "status:<port>"; /metrics is
    served by one), from schedstat (nanoseconds, where stat's ticks are 10 ms)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith("status:"):
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
        except OSError:
            continue
    return total


def max_listeners():
    """--max-listeners for --external-nat: 10,000 ClusterIPs, 10,000 external IPs and 1,000
    NodePorts are 21,000 listeners with one worker, past a 20,000 RLIMIT_NOFILE less the data
    path's --fd-reserve (4,096), and raising the hard limit takes CAP_SYS_RESOURCE. Past the
    cap the proxy leaves whole Services unserved (logged, sluice_unserved_service_ports); the
    NAT programs every one."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 5000


def report_nat_cold_start(m, start, synced, seen, in_order, frontends, socket_lb):
    """Prints when every eBPF NAT frontend was in sluice_nat_svc and what the first sync's
    external-nat consumer took; returns the former (seconds after the agent's start)."""
    if seen is None:
        raise RuntimeError("not every eBPF NAT frontend appeared in sluice_nat_svc")
    cold = seen - start
    order = "" if in_order else "; not written in the order assumed: when the last appeared"
    syncs = m["kubeproxy_sync_proxy_rules_duration_seconds_count"]
    if syncs != 1 or m[NAT_APPLIED.format("count")] != 1:
        print(f"eBPF NAT cold start: {cold * 1000:.0f} ms to all {frontends} frontends in "
              f"sluice_nat_svc ({syncs:.0f} syncs before the first scrape: no breakdown{order})")
        return cold
    sync_start = synced - m["kubeproxy_sync_proxy_rules_duration_seconds_sum"]
    nat = m[NAT_APPLIED.format("sum")]
    # A full sync's NAT step runs beside socket LB's (Proxier::Order::kBeside): both end
    # times count from the sync's start.
    lb = (f", socket LB's {m[LB_APPLIED.format('sum')] * 1000:.0f} ms after"
          if socket_lb else "")
    print(f"eBPF NAT cold start: {cold * 1000:.0f} ms to all {frontends} frontends in "
          f"sluice_nat_svc (the first sync started at {(sync_start - start) * 1000:.0f} ms, "
          f"every frontend there {(seen - sync_start) * 1000:.0f} ms after; its external-nat "
          f"step, counters and sweep included, ended {nat * 1000:.0f} ms after the sync's "
          f"start{lb}{order})")
    return cold


def report_nat_changes(cold, applied, own, put_ms, skipped, maps):
    """Prints the eBPF NAT's per-change latencies and map memory; returns whether the issue-25
    targets are met."""
    ms = [x * 1000 for x in applied]
    own_ms = [x * 1000 for x in own]
    print(f"eBPF NAT, sync start -> change in the maps over {len(ms)} changes "
          f"({skipped} skipped: their sync overlapped another): "
          f"p50 {percentile(ms, 50):.2f} ms, p90 {percentile(ms, 90):.2f} ms, "
          f"p99 {percentile(ms, 99):.2f} ms, max {max(ms):.2f} ms "
          f"(the external-nat step itself: p50 {percentile(own_ms, 50):.2f} ms, "
          f"p99 {percentile(own_ms, 99):.2f} ms)")
    print(f"eBPF NAT, etcd put -> change in the maps (polled from outside): p50 "
          f"{percentile(put_ms, 50):.1f} ms, p90 {percentile(put_ms, 90):.1f} ms, "
          f"p99 {percentile(put_ms, 99):.1f} ms, max {max(put_ms):.1f} ms")
    print(f"eBPF NAT maps after the changes: {format_maps(maps)} (sluice_nat_ct is "
          f"preallocated: --external-max-flows entries)")
    ok = cold < 1 and percentile(ms, 99) < 5
    print("eBPF NAT targets (cold start to every frontend < 1 s, sync start -> in the maps "
          "p99 < 5 ms):", "met" if ok else "NOT met")
    return ok


def check_translation(cgroup, metrics, n):
    """connect()s from `cgroup` to three ClusterIPs: translated, each goes to an unroutable
    endpoint (ENETUNREACH at once); untranslated, it would reach the agent's proxy."""
    def translated(m):
        return sum(v for k, v in m.items() if k.startswith("sluice_socket_lb_translations_total"))
    before = translated(metrics.scrape())
    code = ("import socket, sys\n"
            "for ip in sys.argv[1:]:\n"
            "    s = socket.socket(); s.settimeout(2)\n"
            "    print(s.connect_ex((ip, 80)))\n")
    ips = [cluster_ip(i) for i in (0, n // 2, n - 1)]
    out = subprocess.run([sys.executable, "-c", code] + ips, capture_output=True, text=True,
                         check=True, preexec_fn=cgroup.join_fn()).stdout.split()
    grew = translated(metrics.scrape()) - before
    ok = grew == len(ips) and all(int(e) == errno.ENETUNREACH for e in out)
    print(f"translation check from {cgroup.path}: connect() to {', '.join(ips)}: "
          f"{', '.join(os.strerror(int(e)) if int(e) else 'connected' for e in out)}; "
          f"translations +{grew:.0f}: {'ok' if ok else 'NOT TRANSLATED'}")
    return ok


def run(args):
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    workdir = tempfile.mkdtemp(prefix="sluice-etcd-bench-", dir="/dev/shm")
    etcd = agent = cgroup = svc_map = nat_map = None
    try:
        if args.socket_lb:
            cgroup = ChildCgroup("sluice-etcd-scale")
            lb_args = ["--socket-lb=on", f"--socket-lb-cgroup={cgroup.path}", "--bpf-root="]
        else:
            # The default (auto) would attach to the cgroup v2 root and pin in /sys/fs/bpf.
            lb_args = ["--socket-lb=off", "--bpf-root="]
        if args.external_nat:
            make_node_device()
            lb_args += ["--external-datapath=bpf", f"--external-devices={NODE_DEVICE}",
                        f"--nodeport-addresses={NODE_IP}/32", f"--max-listeners={max_listeners()}",
                        # ClusterIPs local by one route: 20,000 VIPs on lo (no dummy link type
                        # on this kernel) took the first sync's proxy step 21-31 s.
                        "--service-cluster-ip-range=10.96.0.0/16",
                        # The 10,000 external IPs still take seconds: no periodic sync right
                        # after the first one to blur its breakdown.
                        "--sync-period=10m"]
        else:
            # The eBPF NAT of remote clients would attach to this machine's network devices.
            lb_args.append("--external-datapath=proxy")
        etcd = Etcd(workdir)
        t = time.time()
        n, per = args.services, args.endpoints_per_service
        endpoints = {i: [endpoint_ip(i, j) for j in range(per)] for i in range(n)}
        items = []
        for i in range(n):
            items.append((f"{PREFIX}/services/bench/svc-{i}", service(i, args.external_nat)))
            items.append((f"{PREFIX}/endpointslices/bench/svc-{i}-1", slice_(i, endpoints[i])))
        etcd.put_many(items)
        size = sum(len(k) + len(v) for k, v in items)
        print(f"loaded {n} services, {n * per} endpoints ({size / 2**20:.1f} MiB of JSON) "
              f"into etcd in {time.time() - t:.1f} s")

        metrics_port = free_port()
        health_port = free_port()
        while health_port == metrics_port:
            health_port = free_port()
        log = open(os.path.join(workdir, "agent.log"), "w")
        start = time.time()
        agent = subprocess.Popen(
            args.wrap.split() + [args.agent, f"--source=etcd:{etcd.url}",
             f"--healthz-bind-address=127.0.0.1:{health_port}",
             f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--min-sync-period=0s",
             f"--workers={args.workers}", "--hostname-override=node1",
             # Not the host's /run/sluice: the strict-ARP record names this script's namespace.
             f"--state-dir={workdir}/state"] + lb_args + args.agent_arg,
            stdout=log, stderr=subprocess.STDOUT)
        metrics = Metrics(metrics_port)
        # Socket LB writes service ports in name order: "bench/svc-999:http" (of 10,000) is the
        # last one in the kernel when the first sync's maps are complete (watched from outside:
        # the agent's histogram also counts the sweep of stale entries that follows).
        last_key = lb_key(cluster_ip(max(range(n), key=lambda i: f"svc-{i}:")), 80)
        svc_map = None
        lb_seen = None
        next_scan = 0
        # The eBPF NAT's frontends not yet seen in sluice_nat_svc, the last one written first.
        nat_pending = nat_keys(n) if args.external_nat else []
        nat_frontends = len(nat_pending)
        nat_seen = None
        nat_in_order = True  # every frontend was there once the last one written was
        pid = None
        # /healthz reports the current time while healthy (kube-proxy's lastUpdated), so it
        # cannot tell that a sync ended: the sync gauge is read every 100 ms instead (cheap
        # before the first sync has programmed anything).
        next_scrape = 0
        while True:
            if agent.poll() is not None:
                raise RuntimeError("sluice-agent exited; see agent.log")
            if time.time() - start > (180 if args.external_nat else 60):
                raise RuntimeError("no complete sync in time; see agent.log")
            pid = pid or agent_pid(agent, args)
            want_lb = args.socket_lb and svc_map is None
            want_nat = args.external_nat and nat_map is None
            if pid and (want_lb or want_nat) and time.time() >= next_scan:
                found = bpf_maps(pid, "sluice_")
                ids = [x["id"] for x in found if x["name"] == "sluice_lb_svc"]
                if want_lb and ids:
                    svc_map = BpfMap(ids[0])
                # Not the startup self-test's object, whose maps are small.
                ids = [x["id"] for x in found if x["name"] == "sluice_nat_svc"
                       and x["max_entries"] >= nat_frontends]
                if want_nat and ids:
                    nat_map = BpfMap(ids[0])
                next_scan = time.time() + 0.02
            if args.socket_lb and lb_seen is None:
                if svc_map is not None and svc_map.lookup(last_key, 24) is not None:
                    lb_seen = time.time()
            if nat_map is not None and nat_pending:
                # One pass through the frontends not yet seen, stopping at the first missing.
                t = time.time()
                untouched = len(nat_pending) == nat_frontends
                while nat_pending and nat_map.lookup(nat_pending[0], 24) is not None:
                    nat_pending.pop(0)
                if not nat_pending:
                    # In order, the last one written was there at `t` and so were the others.
                    nat_seen = t if untouched and nat_in_order else time.time()
                elif len(nat_pending) < nat_frontends:
                    nat_in_order = False  # some written after the one taken for last
            nat_done = not args.external_nat or not nat_pending
            # With socket LB or the NAT, no scrape (it reads every counter) until the maps are
            # complete.
            if time.time() >= next_scrape and (not args.socket_lb or lb_seen is not None) \
                    and nat_done:
                m = metrics.scrape()
                if m and m.get("kubeproxy_sync_proxy_rules_last_timestamp_seconds", 0) > 0:
                    break
                next_scrape = time.time() + 0.1
            time.sleep(0.002 if args.socket_lb or args.external_nat else 0.005)
        m = metrics.scrape()
        synced = m["kubeproxy_sync_proxy_rules_last_timestamp_seconds"]
        # Nothing changes in etcd meanwhile: the source's last delivery is its first read.
        read = m[f'sluice_source_last_sync_timestamp_seconds{{source="etcd:{etcd.url}"}}']
        cold = synced - start
        vips = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"],
                              capture_output=True, text=True).stdout.count(" 10.96.")
        listeners = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout
        listeners = sum(1 for line in listeners.splitlines() if " 10.96." in line)
        pid = agent_pid(agent, args)
        after_start = rss_kib(pid)
        print(f"cold start: {cold * 1000:.0f} ms to the first complete sync "
              f"({vips} VIPs, {listeners} listeners); the etcd source had read everything "
              f"after {(read - start) * 1000:.0f} ms, the rest is the first sync")
        lb_cold = None
        if args.socket_lb:
            if lb_seen is None:
                raise RuntimeError("the last service's frontend never appeared in sluice_lb_svc")
            lb_cold = lb_seen - start
            if m["kubeproxy_sync_proxy_rules_duration_seconds_count"] != 1 or \
                    m[LB_APPLIED.format("count")] != 1:
                # A slow first sync (a loaded machine) can be followed by a periodic one.
                print(f"socket LB cold start: {lb_cold * 1000:.0f} ms to every frontend in the "
                      f"kernel map ({m['kubeproxy_sync_proxy_rules_duration_seconds_count']:.0f} "
                      f"syncs before the first scrape: no breakdown)")
            else:
                sync_start = synced - m["kubeproxy_sync_proxy_rules_duration_seconds_sum"]
                print(f"socket LB cold start: {lb_cold * 1000:.0f} ms to every frontend in the "
                      f"kernel map (the first sync started at {(sync_start - start) * 1000:.0f} ms;"
                      f" its socket-LB step, sweep included, ended "
                      f"{m[LB_APPLIED.format('sum')] * 1000:.0f} ms after, the proxy's "
                      f"{m[PROXY_APPLIED.format('sum')] * 1000:.0f} ms after)")
            print(f"socket LB maps after the cold start: {format_maps(bpf_maps(pid))}")
            if not check_translation(cgroup, metrics, n):
                raise RuntimeError("socket LB did not translate connects to ClusterIPs")

        nat_cold = None
        if args.external_nat:
            nat_cold = report_nat_cold_start(m, start, synced, nat_seen, nat_in_order,
                                             nat_frontends, args.socket_lb)
            print(f"eBPF NAT maps after the cold start: "
                  f"{format_maps(bpf_maps(pid, 'sluice_nat_'))}")

        latencies = []
        syncs = []  # of each latency, the sync that programmed it (proxier + data path)
        lb_applied = []  # sync start -> socket-LB maps programmed, per change
        nat_applied = []  # sync start -> eBPF NAT maps programmed, per change
        nat_own = []  # of which the external-nat consumer's own step
        proxy_applied = []
        all_applied = []  # sync start -> every consumer applied
        skipped = 0  # changes whose sync overlapped another one (a periodic resync)
        rng = random.Random(1)
        before = metrics.scrape()
        key_count = "kubeproxy_network_programming_duration_seconds_count"
        key_sum = "kubeproxy_network_programming_duration_seconds_sum"
        put_ms = []  # etcd put -> the changed service's entry in sluice_lb_svc, seen from outside
        nat_put_ms = []  # the same for sluice_nat_svc
        consumers = (([LB_APPLIED] if args.socket_lb else [])
                     + ([NAT_APPLIED] if args.external_nat else []) + [PROXY_APPLIED, LAST_APPLIED])
        for c in range(args.changes):
            i = rng.randrange(n)
            endpoints[i][rng.randrange(per)] = endpoint_ip(i, per + c % (64 - per))
            key = lb_key(cluster_ip(i), 80)
            was = svc_map.lookup(key, 24) if svc_map is not None else None
            nat_key = lb_key(external_ip(i), 80)
            nat_was = nat_map.lookup(nat_key, 24) if nat_map is not None else None
            trigger = datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="microseconds").replace("+00:00", "Z")
            t_put = time.time()
            etcd.put(f"{PREFIX}/endpointslices/bench/svc-{i}-1", slice_(i, endpoints[i], trigger))
            pause = rng.uniform(0.01, 0.03)
            deadline = time.time() + 10
            # A new backend set is a new set id in the service's value.
            for name, m, k, old_value, out in (
                    ("sluice_lb_svc", svc_map, key, was, put_ms),
                    ("sluice_nat_svc", nat_map, nat_key, nat_was, nat_put_ms)):
                if m is None:
                    continue
                while m.lookup(k, 24) == old_value:
                    if time.time() > deadline:
                        raise RuntimeError(f"change {c} not in {name} within 10 s")
                    # Not a busy loop: that would take one of the 2 cores from etcd and the
                    # agent; the timer slack (50 us) and a wake-up add well under 1 ms.
                    time.sleep(0.0002)
                out.append((time.time() - t_put) * 1000)
            if svc_map is not None or nat_map is not None:
                # The pause between changes goes here, before the scrape: a scrape (42 ms of
                # the agent's CPU then, 6-14 ms since one read per counter map, a read of every
                # service's BPF entry) started while the rest of the sync runs takes one of the
                # 2 cores it needs.
                time.sleep(pause)
            while True:
                if time.time() > deadline:
                    raise RuntimeError(f"change {c} not programmed within 10 s")
                m = metrics.scrape()  # once the maps have it: the rest of the sync is short
                if m and m[key_count] > before[key_count]:
                    break
                time.sleep(0.002)
            if m[key_count] - before[key_count] != 1:
                raise RuntimeError("changes coalesced; the measurement needs one per sync")
            latencies.append(m[key_sum] - before[key_sum])
            key_sync = "kubeproxy_sync_proxy_rules_duration_seconds_sum"
            syncs.append(m[key_sync] - before[key_sync])
            if args.socket_lb or args.external_nat:
                counts = [m[k.format("count")] - before[k.format("count")] for k in consumers]
                sums = {k: m[k.format("sum")] - before[k.format("sum")] for k in consumers}
                if counts == [1] * len(consumers):
                    if args.socket_lb:
                        lb_applied.append(sums[LB_APPLIED])
                    if args.external_nat:
                        nat_applied.append(sums[NAT_APPLIED])
                        # Socket LB's step comes first in the same sync.
                        nat_own.append(sums[NAT_APPLIED] - sums.get(LB_APPLIED, 0))
                    proxy_applied.append(sums[PROXY_APPLIED])
                    all_applied.append(sums[LAST_APPLIED])
                else:
                    skipped += 1
            before = m
            if svc_map is None and nat_map is None:
                time.sleep(pause)
        after_changes = rss_kib(pid)
        ms = [x * 1000 for x in latencies]
        print(f"endpoint change -> programmed over {len(ms)} changes: "
              f"p50 {percentile(ms, 50):.1f} ms, p90 {percentile(ms, 90):.1f} ms, "
              f"p99 {percentile(ms, 99):.1f} ms, max {max(ms):.1f} ms")
        sync_ms = [x * 1000 for x in syncs]
        pre_ms = [a - b for a, b in zip(ms, sync_ms)]
        print(f"  of which the sync (proxier + data path): p50 {percentile(sync_ms, 50):.1f} ms, "
              f"p99 {percentile(sync_ms, 99):.1f} ms; before it (etcd commit, watch, decode, "
              f"mux, runner): p50 {percentile(pre_ms, 50):.1f} ms, "
              f"p99 {percentile(pre_ms, 99):.1f} ms")
        print(f"agent RSS: {after_start['VmRSS'] / 1024:.1f} MiB after the cold start, "
              f"{after_changes['VmRSS'] / 1024:.1f} MiB after the changes "
              f"(peak {after_changes['VmHWM'] / 1024:.1f} MiB)")
        with open(os.path.join(workdir, "agent.log")) as f:
            for line in f:
                if "etcd_source" in line and " read " in line:
                    print("agent:", line.split("] ", 1)[1].strip())
        ok = cold < 2 and percentile(ms, 99) < 50 and after_changes["VmHWM"] < 150 * 1024
        print("targets (< 2 s, p99 < 50 ms, < 150 MiB):", "met" if ok else "NOT met")
        if args.socket_lb:
            lb_ms = [x * 1000 for x in lb_applied]
            px_ms = [x * 1000 for x in proxy_applied]
            all_ms = [x * 1000 for x in all_applied]
            print(f"socket LB, sync start -> change in the maps over {len(lb_ms)} changes "
                  f"({skipped} skipped: their sync overlapped another): "
                  f"p50 {percentile(lb_ms, 50):.2f} ms, p90 {percentile(lb_ms, 90):.2f} ms, "
                  f"p99 {percentile(lb_ms, 99):.2f} ms, max {max(lb_ms):.2f} ms "
                  f"(proxy applied: p50 {percentile(px_ms, 50):.2f} ms, "
                  f"p99 {percentile(px_ms, 99):.2f} ms)")
            print(f"sync start -> applied by every consumer: p50 {percentile(all_ms, 50):.2f} ms, "
                  f"p90 {percentile(all_ms, 90):.2f} ms, p99 {percentile(all_ms, 99):.2f} ms, "
                  f"max {max(all_ms):.2f} ms")
            if put_ms:
                print(f"socket LB, etcd put -> change in the maps (polled from outside): p50 "
                      f"{percentile(put_ms, 50):.1f} ms, p90 {percentile(put_ms, 90):.1f} ms, "
                      f"p99 {percentile(put_ms, 99):.1f} ms, max {max(put_ms):.1f} ms")
            print(f"socket LB maps after the changes: {format_maps(bpf_maps(pid))}")
            scrape_ms = []
            cpu_before = status_cpu_seconds(pid)
            for _ in range(5):
                t0 = time.perf_counter()
                metrics.scrape()
                scrape_ms.append((time.perf_counter() - t0) * 1000)
            cpu_ms = (status_cpu_seconds(pid) - cpu_before) * 1000 / 5
            print(f"one /metrics scrape takes {percentile(scrape_ms, 50):.1f} ms "
                  f"(median of 5; the socket-LB counters read every service's BPF entry), "
                  f"{cpu_ms:.1f} ms of the agent's status thread's CPU (mean of the 5)")
            lb_ok = (lb_cold < 0.5 and percentile(all_ms, 99) < 2 and bool(put_ms)
                     and percentile(put_ms, 99) < 10)
            print("socket LB targets (cold start to every frontend < 0.5 s, sync start -> every "
                  "consumer applied p99 < 2 ms, etcd put -> in the maps p99 < 10 ms):",
                  "met" if lb_ok else "NOT met")
            ok = ok and lb_ok
        if args.external_nat:
            ok = report_nat_changes(nat_cold, nat_applied, nat_own, nat_put_ms, skipped,
                                    bpf_maps(pid, "sluice_nat_")) and ok
        return 0 if ok else 1
    finally:
        for bpf_map in (svc_map, nat_map):
            if bpf_map is not None:
                bpf_map.close()
        if agent is not None and agent.poll() is None:
            agent.terminate()
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:  # etcd and the cgroup must still go
                agent.kill()
                agent.wait()
        if cgroup is not None:
            cgroup.remove([agent])
        if etcd is not None:
            etcd.stop()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--agent", default=os.path.join(root, "build/agent/sluice-agent"))
    parser.add_argument("--services", type=int, default=10000)
    parser.add_argument("--endpoints-per-service", type=int, default=10)
    parser.add_argument("--changes", type=int, default=200)
    # One worker: each worker listens on every service port, and 10,000 listeners per worker
    # fill half of a 20,000 RLIMIT_NOFILE hard limit.
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    parser.add_argument("--agent-arg", action="append", default=[],
                        help="extra sluice-agent flag (repeatable), e.g. --agent-arg=--v=1")
    parser.add_argument("--wrap", default="",
                        help="command to run the agent under, e.g. 'perf record -g -o F --' "
                             "(RSS and the BPF maps are the wrapped agent's)")
    parser.add_argument("--socket-lb", action="store_true",
                        help="socket-level balancing on, for a child cgroup the script creates")
    parser.add_argument("--external-nat", action="store_true",
                        help="the eBPF NAT of remote clients on, on a veth in the script's "
                             "namespace; services get external IPs, every tenth a NodePort")
    args = parser.parse_args()
    args.agent = os.path.abspath(args.agent)
    enter_private_netns()
    exit_on_signals()
    sys.exit(run(args))


if __name__ == "__main__":
    main()
