#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tunnel benchmark on loopback (issue 6, item 7): one tunnelled connection 10 MiB down and up,
10 concurrent ones, dial latency, and RSS with N idle tunnelled connections, through the HTTP
CONNECT frontend over TCP+mTLS (the path kube-apiserver would use with http-connect mode).

Usage: /usr/bin/python3 scripts/bench_tunnel.py BUILD_DIR [--idle N] [--mib M]
Needs Debian's python3-grpcio (for the shared harness) and openssl."""

import argparse
import os
import socket
import ssl
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def setup_env(build):
    os.environ["SLUICE_TUNNEL_SERVER"] = os.path.join(build, "tunnel/server/sluice-tunnel-server")
    os.environ["SLUICE_PROXY_AGENT"] = os.path.join(build, "tunnel/agent/sluice-proxy-agent")
    os.environ["SLUICE_PROTO_PY"] = os.path.join(build, "proto/python")
    sys.path.insert(0, os.path.join(HERE, "../tests/integration/tunnel"))


class Sink:
    """Backend: 'D<n>\\n' -> sends n bytes; 'U<n>\\n' -> reads n bytes, answers 'ok'."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        line = f.readline()
        if not line:
            return
        n = int(line[1:])
        if line[:1] == b"D":
            buf = b"x" * (1 << 20)
            while n > 0:
                c.sendall(buf[: min(n, len(buf))])
                n -= min(n, len(buf))
        elif line[:1] == b"U":
            while n > 0:
                b = f.read1(1 << 20)
                if not b:
                    break
                n -= len(b)
            c.sendall(b"ok")
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass
        c.close()


class Holder:
    """Backend for idle tunnels: accepts and holds sockets, no thread per connection."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            self.held.append(self.sock.accept()[0])


def connect(server, certs, dest_port):
    ctx = ssl.create_default_context(cafile=certs.p("ca.crt"))
    ctx.load_cert_chain(certs.p("client.crt"), certs.p("client.key"))
    raw = socket.create_connection(("127.0.0.1", server.server_port))
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % dest_port)
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head)
    return s


def download(server, certs, port, n):
    s = connect(server, certs, port)
    s.sendall(b"D%d\n" % n)
    got = 0
    while got < n:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    s.close()
    return got


def upload(server, certs, port, n):
    s = connect(server, certs, port)
    s.sendall(b"U%d\n" % n)
    buf = b"y" * (1 << 20)
    left = n
    while left > 0:
        s.sendall(buf[: min(left, len(buf))])
        left -= min(left, len(buf))
    ok = s.recv(2)
    s.close()
    return n if ok == b"ok" else 0


def rate(n, secs):
    return "%.0f MB/s" % (n / secs / 1e6)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--mib", type=int, default=10)
    args = ap.parse_args()
    setup_env(args.build)
    import tunnel_harness as h

    env = h.Env()
    sink = Sink()
    try:
        server = env.server(mode="http-connect", uds=False)
        agent = env.agent(server)
        h.wait_until(server.ready)
        n = args.mib << 20
        for name, fn in (("down", download), ("up", upload)):
            start = time.time()
            moved = fn(server, env.certs, sink.port, n)
            print("1 connection %s %d MiB: %s" % (name, args.mib, rate(moved, time.time() - start)))
        total = [0]
        lock = threading.Lock()

        def one():
            m = download(server, env.certs, sink.port, n)
            with lock:
                total[0] += m

        start = time.time()
        threads = [threading.Thread(target=one) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("10 connections down %d MiB each: %s aggregate" % (args.mib, rate(total[0], time.time() - start)))
        lat = []
        for _ in range(200):
            start = time.time()
            connect(server, env.certs, sink.port).close()
            lat.append(time.time() - start)
        lat.sort()
        print("dial latency (TLS handshake + CONNECT + agent dial): p50 %.2f ms, p99 %.2f ms"
              % (lat[100] * 1e3, lat[197] * 1e3))
        base = (rss_kib(server.proc.p.pid), rss_kib(agent.proc.p.pid))
        holder = Holder()
        start = time.time()
        idle = [connect(server, env.certs, holder.port) for _ in range(args.idle)]
        print("opened %d tunnels in %.1fs" % (args.idle, time.time() - start))
        time.sleep(1)
        after = (rss_kib(server.proc.p.pid), rss_kib(agent.proc.p.pid))
        print("RSS with %d idle tunnels: server %d MiB (+%d), agent %d MiB (+%d)"
              % (args.idle, after[0] >> 10, (after[0] - base[0]) >> 10, after[1] >> 10,
                 (after[1] - base[1]) >> 10))
        for s in idle:
            s.close()
    finally:
        env.close()


if __name__ == "__main__":
    main()
