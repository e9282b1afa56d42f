#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tunnel benchmark on loopback (issue 6, item 7): throughput of one tunnelled connection down
and up, of 10 concurrent ones, dial latency, and RSS with N idle tunnelled connections.

Paths, interleaved per repetition so a noisy machine hits them alike:
  direct    client -> backend (the ceiling: what loopback TCP does with these movers)
  uds       HTTP CONNECT over the Unix-socket frontend (kube-apiserver's usual egress setup),
            agent link over TLS
  tls       HTTP CONNECT over the TCP+mTLS frontend, agent link over TLS (two TLS hops)
Bytes move with sendfile/splice where the socket is plaintext and with 1 MiB ssl reads and
writes where it is TLS, so the Python client and backend cost little next to what is measured.

Usage: /usr/bin/python3 scripts/bench_tunnel.py BUILD_DIR [--reps 5] [--mib 10,256] [--idle N]
Needs Debian's python3-grpcio (for the shared test harness) and openssl."""

import argparse
import fcntl
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = 1 << 20


def setup_env(build):
    os.environ["SLUICE_TUNNEL_SERVER"] = os.path.join(build, "tunnel/server/sluice-tunnel-server")
    os.environ["SLUICE_PROXY_AGENT"] = os.path.join(build, "tunnel/agent/sluice-proxy-agent")
    os.environ["SLUICE_PROTO_PY"] = os.path.join(build, "proto/python")
    sys.path.insert(0, os.path.join(HERE, "../tests/integration/tunnel"))


class Payload:
    """A file in /dev/shm to sendfile() from."""

    def __init__(self, mib):
        self.path = "/dev/shm/sluice-bench-tunnel-%d" % os.getpid()
        with open(self.path, "wb") as f:
            f.write(b"x" * (mib << 20))
        self.size = mib << 20
        self.fd = os.open(self.path, os.O_RDONLY)

    def close(self):
        os.close(self.fd)
        os.unlink(self.path)


def send_bytes(sock, payload, n):
    """Sends n bytes: sendfile on a plain socket, 1 MiB writes on a TLS one."""
    if isinstance(sock, ssl.SSLSocket):
        view = memoryview(b"y" * CHUNK)
        while n > 0:
            sent = sock.send(view[:min(n, CHUNK)])
            n -= sent
        return
    while n > 0:
        # Offsets wrap inside the payload file.
        sent = os.sendfile(sock.fileno(), payload.fd, 0, min(n, payload.size))
        if sent == 0:
            raise RuntimeError("sendfile: peer closed")
        n -= sent


def recv_bytes(sock, n, pipe):
    """Reads and drops n bytes: splice to /dev/null on a plain socket, recv_into on TLS."""
    got = 0
    if isinstance(sock, ssl.SSLSocket):
        buf = bytearray(CHUNK)
        while got < n:
            m = sock.recv_into(buf, min(CHUNK, n - got))
            if m == 0:
                break
            got += m
        return got
    r, w, null = pipe
    while got < n:
        m = os.splice(sock.fileno(), w, min(CHUNK, n - got))
        if m == 0:
            break
        left = m
        while left > 0:
            left -= os.splice(r, null, left)
        got += m
    return got


def new_pipe():
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, CHUNK)
    return r, w, os.open("/dev/null", os.O_WRONLY)


def close_pipe(p):
    for fd in p:
        os.close(fd)


class Backend:
    """'D<n>\\n': sends n bytes; 'U<n>\\n': reads n bytes, answers 'ok'; then waits for EOF."""

    def __init__(self, payload):
        self.payload = payload
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        line = b""
        while not line.endswith(b"\n"):
            b = c.recv(1)
            if not b:
                c.close()
                return
            line += b
        n = int(line[1:])
        if line[:1] == b"D":
            send_bytes(c, self.payload, n)
        else:
            pipe = new_pipe()
            recv_bytes(c, n, pipe)
            close_pipe(pipe)
            c.sendall(b"ok")
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass
        c.close()


HOLDER = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4096)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
"""


class Holder:
    """Backend for idle tunnels, in its own process (descriptors are limited per process):
    accepts and holds sockets."""

    def __init__(self):
        self.proc = subprocess.Popen(["/usr/bin/python3", "-c", HOLDER], stdout=subprocess.PIPE)
        self.port = int(self.proc.stdout.readline())

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Dialer:
    def __init__(self, server, certs):
        self.server = server
        self.ctx = ssl.create_default_context(cafile=certs.p("ca.crt"))
        self.ctx.load_cert_chain(certs.p("client.crt"), certs.p("client.key"))

    def connect(self, path, port):
        if path == "direct":
            return socket.create_connection(("127.0.0.1", port))
        if path == "uds":
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.server["uds"].uds)
        else:
            raw = socket.create_connection(("127.0.0.1", self.server["tls"].server_port))
            s = self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        head = b""
        while b"\r\n\r\n" not in head:
            b = s.recv(1)  # byte by byte: nothing after the head may be consumed here
            if not b:
                break
            head += b
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("CONNECT: %r" % head)
        return s


def transfer(dialer, path, port, payload, direction, n):
    """Seconds to move n bytes in one tunnelled connection (dial excluded)."""
    s = dialer.connect(path, port)
    pipe = new_pipe()
    try:
        start = time.perf_counter()
        if direction == "down":
            s.sendall(b"D%d\n" % n)
            got = recv_bytes(s, n, pipe)
        else:
            s.sendall(b"U%d\n" % n)
            send_bytes(s, payload, n)
            got = n if s.recv(2) == b"ok" else 0
        secs = time.perf_counter() - start
    finally:
        close_pipe(pipe)
        s.close()
    if got != n:
        raise RuntimeError("%s %s: moved %d of %d bytes" % (path, direction, got, n))
    return secs


def parallel(dialer, path, port, payload, n, conns):
    errors = []
    secs = []

    def one():
        try:
            secs.append(transfer(dialer, path, port, payload, "down", n))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    start = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - start


def cpu_seconds(procs):
    """User + system CPU seconds of these harness processes so far."""
    total = 0.0
    for p in procs:
        with open("/proc/%d/stat" % p.proc.p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", default="10,256", help="transfer sizes, MiB, comma-separated")
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--paths", default="direct,uds,tls")
    args = ap.parse_args()
    setup_env(args.build)
    import tunnel_harness as h

    # Every idle tunnel costs the client, server, agent and backend a descriptor each (two for
    # the agent and server, whose limit they raise themselves).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(soft, min(hard, 2 * args.idle + 1024))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    sizes = [int(m) for m in args.mib.split(",")]
    paths = args.paths.split(",")
    env = h.Env()
    payload = Payload(max(sizes))
    backend = Backend(payload)
    try:
        servers = {"uds": env.server(name="s-uds", mode="http-connect", uds=True),
                   "tls": env.server(name="s-tls", mode="http-connect", uds=False)}
        agents = {k: env.agent(s, name="a-" + k) for k, s in servers.items()}
        for s in servers.values():
            h.wait_until(s.ready)
        dialer = Dialer(servers, env.certs)
        results = {}
        cpu = {}  # path -> [server+agent CPU seconds, bytes] over the single-connection runs
        for rep in range(args.reps):
            for mib in sizes:
                for direction in ("down", "up"):
                    for path in paths:
                        procs = [servers[path], agents[path]] if path in servers else []
                        before = cpu_seconds(procs)
                        secs = transfer(dialer, path, backend.port, payload, direction, mib << 20)
                        used = cpu.setdefault(path, [0.0, 0])
                        used[0] += cpu_seconds(procs) - before
                        used[1] += mib << 20
                        results.setdefault(("1 conn", direction, mib, path), []).append(
                            (mib << 20) / secs / 1e6)
            for path in paths:
                secs = parallel(dialer, path, backend.port, payload, sizes[0] << 20, args.conns)
                results.setdefault(("%d conns" % args.conns, "down", sizes[0], path), []).append(
                    args.conns * (sizes[0] << 20) / secs / 1e6)
            print("rep %d/%d done" % (rep + 1, args.reps), file=sys.stderr)

        print("## Throughput, MB/s (median of %d interleaved runs; min-max)" % args.reps)
        print()
        print("| test | " + " | ".join(paths) + " | " +
              " | ".join("%s/direct" % p for p in paths if p != "direct") + " |")
        print("|---|" + "---|" * (len(paths) + len([p for p in paths if p != "direct"])))
        for key in sorted({k[:3] for k in results}, key=lambda k: (k[0], k[2], k[1])):
            med = {p: statistics.median(results[key + (p,)]) for p in paths}
            cells = ["%.0f (%.0f-%.0f)" % (med[p], min(results[key + (p,)]),
                                           max(results[key + (p,)])) for p in paths]
            ratios = ["%.2fx" % (med[p] / med["direct"]) for p in paths
                      if p != "direct" and "direct" in med]
            print("| %s %s %d MiB | %s | %s |" % (key[0], key[1], key[2], " | ".join(cells),
                                                  " | ".join(ratios)))
        print()
        for path in [p for p in paths if p in servers]:
            print("server + agent CPU per GB moved via %s (single-connection runs): %.2f s"
                  % (path, cpu[path][0] / (cpu[path][1] / 1e9)))
        print()
        for path in [p for p in paths if p != "direct"]:
            lat = []
            for _ in range(200):
                start = time.perf_counter()
                dialer.connect(path, backend.port).close()
                lat.append(time.perf_counter() - start)
            lat.sort()
            print("dial latency via %s (client handshake + CONNECT + agent dial + 200 reply): "
                  "p50 %.2f ms, p99 %.2f ms" % (path, lat[100] * 1e3, lat[197] * 1e3))
        server, agent = servers["tls"], agents["tls"]
        base = (rss_kib(server.proc.p.pid), rss_kib(agent.proc.p.pid))
        holder = Holder()
        start = time.time()
        idle = [dialer.connect("tls", holder.port) for _ in range(args.idle)]
        opened = time.time() - start
        time.sleep(2)
        after = (rss_kib(server.proc.p.pid), rss_kib(agent.proc.p.pid))
        print("RSS with %d idle tunnels via tls (opened in %.1f s): server %d MiB (+%d), "
              "agent %d MiB (+%d)" % (args.idle, opened, after[0] >> 10,
                                      (after[0] - base[0]) >> 10, after[1] >> 10,
                                      (after[1] - base[1]) >> 10))
        for s in idle:
            s.close()
        holder.stop()
    finally:
        payload.close()
        env.close()


if __name__ == "__main__":
    main()
