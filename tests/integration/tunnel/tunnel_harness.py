# SPDX-License-Identifier: Apache-2.0
"""Harness for the tunnel integration tests: test certificates, port-0 helpers, processes
(sluice-tunnel-server, sluice-proxy-agent, python http.server) and a Konnectivity gRPC frontend
client built on grpcio's generic stream API with messages generated from proto/client.proto."""

import atexit
import hashlib
import http.server
import os
import random
import select
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

SERVER_BIN = os.environ["SLUICE_TUNNEL_SERVER"]
AGENT_BIN = os.environ["SLUICE_PROXY_AGENT"]
NODE_AGENT_BIN = os.environ.get("SLUICE_AGENT")  # sluice-agent, which hosts a tunnel agent
sys.path.insert(0, os.environ["SLUICE_PROTO_PY"])
import client_pb2 as pb  # noqa: E402  (generated at build time)


_given_ports = set()


def free_port():
    """A port on 127.0.0.1 that was free a moment ago, never one this process was given before.
    Random in 25700-29999, below the kernel's ephemeral range, as testutil::FreePort picks:
    a port bind(0) hands out may be taken next as the source port of any test's outgoing
    connection before the server binds it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        high = min(29999, int(f.read().split()[0]) - 1)
    for _ in range(1000):
        port = random.randint(max(1024, high - 4299), high)
        if port in _given_ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free port in {max(1024, high - 4299)}-{high} after 1000 tries")


def wait_until(cond, timeout=15.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - polling a not-yet-ready service
            pass
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def http_get(url, timeout=5, netns=None):
    """(status, body) of a GET; inside network namespace `netns` if given (through curl)."""
    if netns:
        r = subprocess.run(["ip", "netns", "exec", netns, "curl", "-s", "-m", str(timeout),
                            "-w", "\n%{http_code}", url], capture_output=True, timeout=timeout + 5)
        body, _, code = r.stdout.decode().rpartition("\n")
        return int(code or 0), body
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric_value(body, name):
    """The first sample of `name` in Prometheus text, or None."""
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class Certs:
    """A CA plus server, agent and frontend client certificates, made with openssl."""

    def __init__(self, d):
        self.dir = d
        self._run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                  "-subj", "/CN=sluice-test-ca", "-keyout", self.p("ca.key"), "-out", self.p("ca.crt"))
        self._leaf("server", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self._leaf("agent", "extendedKeyUsage=clientAuth")
        self._leaf("client", "extendedKeyUsage=clientAuth")
        # A certificate from another CA, for the auth-failure tests.
        self._run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                  "-subj", "/CN=rogue", "-keyout", self.p("rogue.key"), "-out", self.p("rogue.crt"))

    def p(self, name):
        return os.path.join(self.dir, name)

    def _run(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def _leaf(self, name, ext):
        extfile = self.p(name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext + "\n")
        self._run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name,
                  "-keyout", self.p(name + ".key"), "-out", self.p(name + ".csr"))
        self._run("x509", "-req", "-in", self.p(name + ".csr"), "-CA", self.p("ca.crt"),
                  "-CAkey", self.p("ca.key"), "-CAcreateserial", "-days", "2",
                  "-extfile", extfile, "-out", self.p(name + ".crt"))


# PR_SET_PDEATHSIG(SIGKILL): a killed test run (ctest timeout) leaves no orphans behind. Set by
# setpriv, which then execs the binary, rather than by a preexec_fn: that forces a real fork(),
# whose grpcio prefork handler can wait for ever on a gRPC thread (seen: a hang in test_drain).
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]


class Proc:
    """A child process with output in a file; killed (by PID) on stop."""

    def __init__(self, argv, log_path):
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.p = subprocess.Popen(_DIE_WITH_PARENT + argv, stdout=self.log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def stop(self):
        if self.alive():
            self.p.kill()
        self.p.wait(timeout=10)
        self.log.close()

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


def in_netns(netns, argv):
    return ["ip", "netns", "exec", netns] + argv if netns else argv


class Server:
    def __init__(self, env, name="server", mode="grpc", uds=True, extra=(), server_id=None,
                 agent_port=None, cluster_ca=True, netns=None):
        self.env = env
        self.netns = netns
        self.name = name
        self.mode = mode
        self.uds = os.path.join(env.dir, name + ".sock") if uds else None
        self.agent_port = agent_port or free_port()
        self.server_port = free_port()
        self.health_port = free_port()
        self.admin_port = free_port()
        c = env.certs
        argv = [SERVER_BIN, "--mode=" + mode, "--agent-port=%d" % self.agent_port,
                "--agent-bind-address=127.0.0.1",
                "--cluster-cert=" + c.p("server.crt"), "--cluster-key=" + c.p("server.key"),
                "--health-port=%d" % self.health_port, "--health-bind-address=127.0.0.1",
                "--admin-port=%d" % self.admin_port, "--server-id=" + (server_id or name)]
        if cluster_ca:
            argv.append("--cluster-ca-cert=" + c.p("ca.crt"))
        if self.uds:
            argv.append("--uds-name=" + self.uds)
        else:
            argv += ["--server-port=%d" % self.server_port, "--server-bind-address=127.0.0.1",
                     "--server-cert=" + c.p("server.crt"), "--server-key=" + c.p("server.key"),
                     "--server-ca-cert=" + c.p("ca.crt")]
        self.proc = Proc(in_netns(netns, argv + list(extra)), os.path.join(env.dir, name + ".log"))
        wait_until(lambda: self._get(self.health_port, "/healthz")[0] == 200,
                   what=name + " healthz")

    def _get(self, port, path):
        return http_get("http://127.0.0.1:%d%s" % (port, path), netns=self.netns)

    def ready(self):
        return self._get(self.health_port, "/readyz")[0] == 200

    def metrics(self):
        return self._get(self.admin_port, "/metrics")[1]

    def metric(self, name):
        return metric_value(self.metrics(), name)

    def channel(self):
        if self.uds:
            return grpc.insecure_channel("unix:" + self.uds)
        c = self.env.certs
        creds = grpc.ssl_channel_credentials(
            open(c.p("ca.crt"), "rb").read(), open(c.p("client.key"), "rb").read(),
            open(c.p("client.crt"), "rb").read())
        return grpc.secure_channel("127.0.0.1:%d" % self.server_port, creds)


class Agent:
    """sluice-proxy-agent. `allowed`: its --allowed-destinations, by default loopback, where the
    tests' backends listen (the agent refuses loopback unless listed)."""

    def __init__(self, env, server, name="agent", extra=(), cert=True, agent_id=None,
                 allowed="127.0.0.0/8", netns=None):
        self.env = env
        self.netns = netns
        self.health_port = free_port()
        self.admin_port = free_port()
        c = env.certs
        argv = [AGENT_BIN, "--proxy-server-host=127.0.0.1",
                "--proxy-server-port=%d" % server.agent_port, "--ca-cert=" + c.p("ca.crt"),
                "--agent-id=" + (agent_id or name), "--health-server-port=%d" % self.health_port,
                "--health-server-host=127.0.0.1", "--admin-server-port=%d" % self.admin_port,
                "--sync-interval=100ms", "--sync-interval-cap=1s", "--probe-interval=100ms"]
        if cert:
            argv += ["--agent-cert=" + c.p("agent.crt"), "--agent-key=" + c.p("agent.key")]
        if allowed is not None:
            argv.append("--allowed-destinations=" + allowed)
        self.proc = Proc(in_netns(netns, argv + list(extra)), os.path.join(env.dir, name + ".log"))

    def _get(self, path):
        return http_get("http://127.0.0.1:%d%s" % (self.health_port, path), netns=self.netns)

    def ready(self):
        return self._get("/readyz")[0] == 200

    def metric(self, name):
        return metric_value(self._get("/metrics")[1], name)


class NodeAgent:
    """sluice-agent with an empty file source and the tunnel agent on (mTLS to `server`)."""

    def __init__(self, env, server, name="node-a", extra=()):
        self.health_port = free_port()
        self.metrics_port = free_port()
        manifests = os.path.join(env.dir, name + "-manifests")
        os.makedirs(manifests, exist_ok=True)
        c = env.certs
        argv = [NODE_AGENT_BIN, "--source=file:" + manifests, "--hostname-override=" + name,
                "--socket-lb=off", "--bpf-root=", "--external-datapath=proxy",
                "--healthz-bind-address=127.0.0.1:%d" % self.health_port,
                "--metrics-bind-address=127.0.0.1:%d" % self.metrics_port, "--workers=1",
                "--min-sync-period=0s", "--tunnel-server-address=127.0.0.1:%d" % server.agent_port,
                "--tunnel-ca-cert=" + c.p("ca.crt"), "--tunnel-cert=" + c.p("agent.crt"),
                "--tunnel-key=" + c.p("agent.key"),
                # The tests' backends listen on loopback, which the tunnel agent refuses
                # unless listed.
                "--tunnel-allowed-destinations=127.0.0.0/8"]
        self.proc = Proc(argv + list(extra), os.path.join(env.dir, name + ".log"))
        env.procs.append(self.proc)

    def readyz(self):
        return http_get("http://127.0.0.1:%d/readyz" % self.health_port)

    def metric(self, name):
        return metric_value(http_get("http://127.0.0.1:%d/metrics" % self.metrics_port)[1], name)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server API
        if self.path.startswith("/bytes/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(range(256)) * 256
            sent = 0
            while sent < n:
                part = chunk[: min(len(chunk), n - sent)]
                self.wfile.write(part)
                sent += len(part)
            return
        body = b"hello from backend\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _QuietServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # clients that go away mid-response (closed tunnels) are expected


class Backend:
    """A threaded HTTP server on 127.0.0.1, port 0."""

    def __init__(self):
        self.httpd = _QuietServer(("127.0.0.1", 0), _Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class HangingListener:
    """A loopback listener whose accept queue is full, so new connects hang (SYNs dropped):
    a dial that stays pending without leaving loopback."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(c)
        # Full once one filler is established and waiting in the accept queue (backlog 0 holds
        # one); the others' SYNs are dropped.
        _, writable, _ = select.select([], self.fillers, [], 10)
        assert any(c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for c in writable)

    def close(self):
        for c in self.fillers:
            c.close()
        self.sock.close()


def expected_bytes(n):
    chunk = bytes(range(256)) * 256
    return (chunk * (n // len(chunk) + 1))[:n]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


class Env:
    """Per-test temp dir with certs; tracks processes for cleanup."""

    _certs_dir = None

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-tunnel-test-")
        if Env._certs_dir is None:
            Env._certs_dir = tempfile.mkdtemp(prefix="sluice-tunnel-certs-")
            atexit.register(shutil.rmtree, Env._certs_dir, True)
            Env._certs = Certs(Env._certs_dir)
        self.certs = Env._certs
        self.procs = []

    def server(self, **kw):
        s = Server(self, **kw)
        self.procs.append(s.proc)
        return s

    def agent(self, server, **kw):
        a = Agent(self, server, **kw)
        self.procs.append(a.proc)
        return a

    def close(self):
        for p in self.procs:
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class TestCase(unittest.TestCase):
    """A per-test Env whose process logs are printed when the test fails (or always, with
    SLUICE_TUNNEL_LOGS set)."""

    def setUp(self):
        self.env = Env()
        self.addCleanup(self.env.close)  # runs even if tearDown fails: no orphan processes

    def tearDown(self):
        result = getattr(self._outcome, "result", None)
        failed = result is not None and any(
            t is self for t, _ in (result.errors + result.failures))
        if failed or os.environ.get("SLUICE_TUNNEL_LOGS"):
            for p in self.env.procs:
                print("----", p.argv[0], "\n", p.output()[-4000:])


class Tunnel:
    """One Proxy stream: the kube-apiserver side of a Konnectivity tunnel."""

    def __init__(self, channel):
        self.channel = channel
        self.out = []
        self.cv = threading.Condition()
        self.closed = False
        self.rpc = channel.stream_stream(
            "/ProxyService/Proxy", request_serializer=lambda m: m if isinstance(m, bytes)
            else m.SerializeToString(), response_deserializer=pb.Packet.FromString)
        self.responses = self.rpc(self._requests())
        self.received = []
        self.rcv_cv = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _requests(self):
        while True:
            with self.cv:
                while not self.out and not self.closed:
                    self.cv.wait()
                if self.out:
                    m = self.out.pop(0)
                else:
                    return
            yield m

    def _read(self):
        try:
            for p in self.responses:
                with self.rcv_cv:
                    self.received.append(p)
                    self.rcv_cv.notify_all()
        except grpc.RpcError as e:
            with self.rcv_cv:
                self.error = e
        with self.rcv_cv:
            self.received.append(None)
            self.rcv_cv.notify_all()

    def send(self, m):
        with self.cv:
            self.out.append(m)
            self.cv.notify_all()

    def done_writing(self):
        with self.cv:
            self.closed = True
            self.cv.notify_all()

    def recv(self, timeout=10.0, want=None):
        deadline = time.time() + timeout
        with self.rcv_cv:
            while True:
                for i, p in enumerate(self.received):
                    if p is None or want is None or p.type == want:
                        if p is not None:
                            self.received.pop(i)
                        return p
                left = deadline - time.time()
                if left <= 0:
                    raise AssertionError("no packet within %.1fs" % timeout)
                self.rcv_cv.wait(left)

    def dial(self, address, random=1):
        self.send(pb.Packet(type=pb.DIAL_REQ, dialRequest=pb.DialRequest(
            protocol="tcp", address=address, random=random)))
        return self.recv(want=pb.DIAL_RSP).dialResponse

    def data(self, cid, b):
        self.send(pb.Packet(type=pb.DATA, data=pb.Data(connectID=cid, data=b)))

    def close_req(self, cid):
        self.send(pb.Packet(type=pb.CLOSE_REQ, closeRequest=pb.CloseRequest(connectID=cid)))

    def read_until_close(self, timeout=30.0):
        """Concatenated DATA until CLOSE_RSP or stream end."""
        buf = bytearray()
        while True:
            p = self.recv(timeout=timeout)
            if p is None or p.type == pb.CLOSE_RSP:
                return bytes(buf), p
            if p.type == pb.DATA:
                buf += p.data.data

    def cancel(self):
        self.done_writing()
        self.responses.cancel()


def http_request(tunnel, cid, path):
    tunnel.data(cid, ("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
    body, _ = tunnel.read_until_close()
    return body
