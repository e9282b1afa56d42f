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
Targets: cold start < 2 s, p99 < 50 ms, RSS < 150 MiB.

  sudo bench/etcd_scale.py [--agent build/agent/sluice-agent] [--services 10000]
                           [--endpoints-per-service 10] [--changes 200] [--workers 1]
"""
import argparse
import base64
import datetime
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PREFIX = "/sluice/registry"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def service(i):
    return json.dumps({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"svc-{i}", "namespace": "bench"},
        "spec": {"clusterIP": cluster_ip(i), "clusterIPs": [cluster_ip(i)],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                            "targetPort": 8080}]}}, separators=(",", ":"))


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


class Metrics:
    def __init__(self, port):
        self.port = port
        self.conn = None

    def scrape(self):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            self.conn.request("GET", "/metrics")
            response = self.conn.getresponse()
            text = response.read().decode()
        except OSError:
            self.conn = None
            return None
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


def rss_kib(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            m = re.match(r"(VmRSS|VmHWM):\s+(\d+) kB", line)
            if m:
                out[m.group(1)] = int(m.group(2))
    return out


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run(args):
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    workdir = tempfile.mkdtemp(prefix="sluice-etcd-bench-", dir="/dev/shm")
    etcd = agent = None
    try:
        etcd = Etcd(workdir)
        t = time.time()
        n, per = args.services, args.endpoints_per_service
        endpoints = {i: [endpoint_ip(i, j) for j in range(per)] for i in range(n)}
        items = []
        for i in range(n):
            items.append((f"{PREFIX}/services/bench/svc-{i}", service(i)))
            items.append((f"{PREFIX}/endpointslices/bench/svc-{i}-1", slice_(i, endpoints[i])))
        etcd.put_many(items)
        size = sum(len(k) + len(v) for k, v in items)
        print(f"loaded {n} services, {n * per} endpoints ({size / 2**20:.1f} MiB of JSON) "
              f"into etcd in {time.time() - t:.1f} s")

        metrics_port = free_port()
        log = open(os.path.join(workdir, "agent.log"), "w")
        start = time.time()
        agent = subprocess.Popen(
            args.wrap.split() + [args.agent, f"--source=etcd:{etcd.url}", "--healthz-bind-address=",
             f"--metrics-bind-address=127.0.0.1:{metrics_port}", "--min-sync-period=0s",
             f"--workers={args.workers}", "--hostname-override=node1"] + args.agent_arg,
            stdout=log, stderr=subprocess.STDOUT)
        metrics = Metrics(metrics_port)
        synced = None
        while time.time() - start < 60:
            if agent.poll() is not None:
                raise RuntimeError("sluice-agent exited; see agent.log")
            m = metrics.scrape()
            if m and m.get("kubeproxy_sync_proxy_rules_last_timestamp_seconds", 0) > 0:
                synced = m["kubeproxy_sync_proxy_rules_last_timestamp_seconds"]
                # Nothing changes in etcd meanwhile: the source's last delivery is its first read.
                read = m[f'sluice_source_last_sync_timestamp_seconds{{source="etcd:{etcd.url}"}}']
                break
            time.sleep(0.005)
        if synced is None:
            raise RuntimeError("no complete sync within 60 s; see agent.log")
        cold = synced - start
        vips = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"],
                              capture_output=True, text=True).stdout.count(" 10.96.")
        listeners = subprocess.run(["ss", "-Htln"], capture_output=True, text=True).stdout
        listeners = sum(1 for line in listeners.splitlines() if " 10.96." in line)
        after_start = rss_kib(agent.pid)
        print(f"cold start: {cold * 1000:.0f} ms to the first complete sync "
              f"({vips} VIPs, {listeners} listeners); the etcd source had read everything "
              f"after {(read - start) * 1000:.0f} ms, the rest is the first sync")

        latencies = []
        syncs = []  # of each latency, the sync that programmed it (proxier + data path)
        rng = random.Random(1)
        before = metrics.scrape()
        for c in range(args.changes):
            i = rng.randrange(n)
            endpoints[i][rng.randrange(per)] = endpoint_ip(i, per + c % (64 - per))
            trigger = datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="microseconds").replace("+00:00", "Z")
            etcd.put(f"{PREFIX}/endpointslices/bench/svc-{i}-1", slice_(i, endpoints[i], trigger))
            key_count = "kubeproxy_network_programming_duration_seconds_count"
            key_sum = "kubeproxy_network_programming_duration_seconds_sum"
            deadline = time.time() + 10
            while True:
                m = metrics.scrape()
                if m and m[key_count] > before[key_count]:
                    break
                if time.time() > deadline:
                    raise RuntimeError(f"change {c} not programmed within 10 s")
                time.sleep(0.001)
            if m[key_count] - before[key_count] != 1:
                raise RuntimeError("changes coalesced; the measurement needs one per sync")
            latencies.append(m[key_sum] - before[key_sum])
            key_sync = "kubeproxy_sync_proxy_rules_duration_seconds_sum"
            syncs.append(m[key_sync] - before[key_sync])
            before = m
            time.sleep(rng.uniform(0.01, 0.03))
        after_changes = rss_kib(agent.pid)
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
        return 0 if ok else 1
    finally:
        if agent is not None and agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=30)
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
                             "(RSS is then the wrapper's)")
    args = parser.parse_args()
    args.agent = os.path.abspath(args.agent)
    if os.environ.get("SLUICE_BENCH_NETNS") != "1":
        if os.geteuid() != 0:
            sys.exit("run as root: the agent adds VIPs (in a private network namespace)")
        env = dict(os.environ, SLUICE_BENCH_NETNS="1")
        os.execvpe("unshare", ["unshare", "-n", sys.executable] + sys.argv, env)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
