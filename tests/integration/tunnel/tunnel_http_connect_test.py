# SPDX-License-Identifier: Apache-2.0
"""The HTTP CONNECT frontend with real curl (TCP+mTLS, and the Unix socket through a socat
bridge: curl 7.88 sends plain requests, not CONNECT, when --unix-socket is combined with -x) and
raw sockets for the exact reply strings and error codes of the contract."""

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

import tunnel_harness as h


def curl(*args, timeout=30):
    r = subprocess.run(["curl", "-sS", "--max-time", str(timeout), *args],
                       capture_output=True, timeout=timeout + 5)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


def uds_exchange(path, data, timeout=5.0):
    """Sends `data` on the Unix socket and returns everything read until EOF or timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    if data:
        s.sendall(data)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


class HttpConnectTest(h.TestCase):
    def setUp(self):
        super().setUp()
        self.backend = h.Backend()
        self.addCleanup(self.backend.stop)
        self.socat = None

    def tearDown(self):
        if self.socat:
            self.socat.kill()
            self.socat.wait()
        super().tearDown()

    def up(self, uds=True, agent=True, extra=()):
        s = self.env.server(mode="http-connect", uds=uds, extra=list(extra))
        if agent:
            a = self.env.agent(s)
            h.wait_until(s.ready, what="server ready")
            h.wait_until(a.ready, what="agent ready")
        return s

    def url(self, path="/"):
        return "http://127.0.0.1:%d%s" % (self.backend.port, path)

    def mtls_args(self, s):
        c = self.env.certs
        return ["-p", "-x", "https://127.0.0.1:%d" % s.server_port,
                "--proxy-cacert", c.p("ca.crt"), "--proxy-cert", c.p("client.crt"),
                "--proxy-key", c.p("client.key")]

    def bridge(self, s):
        """A TCP port forwarding to the frontend's Unix socket (socat), for curl."""
        self.assertIsNotNone(shutil.which("socat"), "socat is needed for the UDS curl test")
        port = h.free_port()
        self.socat = subprocess.Popen(
            ["socat", "TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork" % port,
             "UNIX-CONNECT:" + s.uds], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        h.wait_until(lambda: socket.create_connection(("127.0.0.1", port), 1).close() is None,
                     what="socat")
        return port

    def test_curl_over_tcp_mtls(self):
        s = self.up(uds=False)
        rc, out, err = curl(*self.mtls_args(s), self.url())
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, b"hello from backend\n")
        # 20 MiB with checksum through the TLS frontend.
        n = 20 << 20
        start = time.time()
        rc, out, err = curl(*self.mtls_args(s), self.url("/bytes/%d" % n))
        print("20 MiB via CONNECT+mTLS: %.2fs" % (time.time() - start))
        self.assertEqual(rc, 0, err)
        self.assertEqual(hashlib.sha256(out).hexdigest(), h.sha256(h.expected_bytes(n)))
        # No client certificate: the TLS handshake is refused.
        c = self.env.certs
        rc, _, _ = curl("-p", "-x", "https://127.0.0.1:%d" % s.server_port,
                        "--proxy-cacert", c.p("ca.crt"), self.url())
        self.assertNotEqual(rc, 0)

    @unittest.skipUnless(h.NODE_AGENT_BIN, "SLUICE_AGENT not set")
    def test_sluice_agent_hosts_the_tunnel_agent(self):
        s = self.up(uds=False, agent=False)
        node = h.NodeAgent(self.env, s, extra=["--tunnel-drain-period=3s"])
        h.wait_until(s.ready, what="server ready")
        h.wait_until(lambda: node.readyz()[0] == 200, what="sluice-agent /readyz")
        self.assertEqual(node.metric("konnectivity_network_proxy_agent_open_server_connections"), 1)
        rc, out, err = curl(*self.mtls_args(s), self.url())
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, b"hello from backend\n")
        # The first SIGTERM drains: still serving, and stopping after the drain period.
        node.proc.signal(signal.SIGTERM)
        h.wait_until(lambda: "draining the tunnel" in node.proc.output(), what="tunnel drain")
        self.assertTrue(node.proc.alive())
        rc, out, err = curl(*self.mtls_args(s), self.url())
        self.assertEqual(rc, 0, err)
        node.proc.p.wait(timeout=15)
        self.assertEqual(node.proc.p.returncode, 0, node.proc.output()[-2000:])
        # With no agent left the frontend answers 503 at once.
        rc, _, err = curl(*self.mtls_args(s), self.url())
        self.assertNotEqual(rc, 0)

    def test_sluice_agent_is_not_ready_without_a_tunnel_server(self):
        if not h.NODE_AGENT_BIN:
            self.skipTest("SLUICE_AGENT not set")
        s = self.up(uds=False, agent=False)
        s.proc.stop()
        node = h.NodeAgent(self.env, s)
        h.wait_until(lambda: "no tunnel server connected" in node.readyz()[1],
                     what="sluice-agent /readyz naming the tunnel")
        self.assertEqual(node.readyz()[0], 503)

    def connect_uds(self, s, port):
        """An established tunnel through the Unix-socket frontend, the 200 reply consumed."""
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(s.uds)
        c.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        reply = b"HTTP/1.1 200 Connection Established\r\n\r\n"
        got = b""
        while len(got) < len(reply):
            b = c.recv(len(reply) - len(got))
            self.assertTrue(b, got)  # closed before the whole reply
            got += b
        self.assertEqual(got, reply)
        return c

    def get_over(self, c):
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while not out.endswith(b"hello from backend\n"):
            b = c.recv(4096)
            self.assertTrue(b, out)
            out += b
        return out

    def test_graceful_shutdown(self):
        s = self.up(extra=["--shutdown-grace-period=20s"])
        open_tunnel = self.connect_uds(s, self.backend.port)
        s.proc.signal(signal.SIGTERM)
        # Not ready, new dials refused with a clear 503; the open tunnel still works.
        h.wait_until(lambda: h.http_get("http://127.0.0.1:%d/readyz" % s.health_port) ==
                     (500, "shutting down"), what="readyz says shutting down")
        out = uds_exchange(s.uds, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % self.backend.port)
        self.assertTrue(out.startswith(b"HTTP/1.1 503 "), out)
        self.assertTrue(out.endswith(b"proxy server is shutting down"), out)
        self.assertIn(b"hello from backend", self.get_over(open_tunnel))
        self.assertTrue(s.proc.alive())
        # The last tunnel closing ends the wait, before the 20 s grace period (wait() raises
        # after 15 s; generous for a loaded machine).
        open_tunnel.close()
        s.proc.p.wait(timeout=15)
        self.assertEqual(s.proc.p.returncode, 0, s.proc.output()[-2000:])
        self.assertIn("shutting down with 0 tunnels open", s.proc.output())

    def test_second_signal_stops_at_once(self):
        s = self.up(extra=["--shutdown-grace-period=60s"])
        open_tunnel = self.connect_uds(s, self.backend.port)
        s.proc.signal(signal.SIGTERM)
        h.wait_until(lambda: "refusing new tunnels" in s.proc.output(), what="first signal")
        s.proc.signal(signal.SIGTERM)
        s.proc.p.wait(timeout=10)
        self.assertEqual(s.proc.p.returncode, 0, s.proc.output()[-2000:])
        self.assertIn("shutting down with 1 tunnels open", s.proc.output())
        # The tunnel was closed, not left hanging.
        open_tunnel.settimeout(5)
        try:
            self.assertEqual(open_tunnel.recv(1), b"")
        except ConnectionResetError:
            pass
        open_tunnel.close()

    def test_curl_over_unix_socket(self):
        s = self.up()
        self.assertEqual(oct(os.stat(s.uds).st_mode & 0o777), "0o770")
        port = self.bridge(s)
        rc, out, err = curl("-p", "-x", "http://127.0.0.1:%d" % port, self.url())
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, b"hello from backend\n")

    def test_exact_success_reply_and_early_bytes(self):
        s = self.up()
        req = ("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: ignored:1\r\n\r\n"
               "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % self.backend.port)
        out = uds_exchange(s.uds, req.encode())
        self.assertTrue(out.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK"),
                        out[:200])
        self.assertTrue(out.endswith(b"hello from backend\n"))

    def test_error_replies(self):
        s = self.up(extra=["--http-header-timeout=500ms"])
        port = h.free_port()
        out = uds_exchange(s.uds, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % port)
        self.assertTrue(out.startswith(b"HTTP/1.1 502 "), out)
        self.assertTrue(out.endswith(
            b"dial tcp 127.0.0.1:%d: connect: connection refused" % port), out)
        # Upstream's bodies: its handler's http.Error text, and Go's server's for a malformed
        # request.
        out = uds_exchange(s.uds, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 405 "), out)
        self.assertTrue(out.endswith(b"\r\n\r\nthis proxy only supports CONNECT passthrough\n"), out)
        out = uds_exchange(s.uds, b"garbage\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out)
        self.assertTrue(out.endswith(b"\r\n\r\n400 Bad Request"), out)
        # A target without a port is the agent's to dial, as upstream's is: Go's error, 502.
        out = uds_exchange(s.uds, b"CONNECT nohost HTTP/1.1\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 502 "), out)
        self.assertTrue(out.endswith(b"dial tcp: address nohost: missing port in address"), out)
        big = b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
        self.assertTrue(uds_exchange(s.uds, big).startswith(b"HTTP/1.1 431 "))
        # The 500 ms header timeout answers, not the 10 s default: the exchange times out
        # after 8 s (generous for a loaded machine).
        slow = uds_exchange(s.uds, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n", timeout=8)
        self.assertTrue(slow.startswith(b"HTTP/1.1 408 "), slow)
        self.assertTrue(s.ready())  # still serving
        limited = 'sluice_tunnel_server_limited_total{limit="%s"}'
        self.assertEqual(s.metric(limited % "header_bytes"), 1)
        self.assertEqual(s.metric(limited % "header_timeout"), 1)

    def test_pending_dials_are_limited_per_client(self):
        s = self.up(extra=["--max-pending-dials-per-client=1"])
        hang = h.HangingListener()
        try:
            waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            waiting.settimeout(10)
            waiting.connect(s.uds)
            waiting.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % hang.port)
            h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_pending_backend_dials") == 1,
                         what="one pending dial")
            out = uds_exchange(s.uds, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % self.backend.port)
            self.assertTrue(out.startswith(b"HTTP/1.1 429 "), out)
            self.assertTrue(out.endswith(b"too many pending dials from this client"), out)
            self.assertEqual(
                s.metric('sluice_tunnel_server_limited_total{limit="pending_dials_per_client"}'), 1)
            waiting.close()  # the client gives up: its slot is free again
            h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_pending_backend_dials") == 0,
                         what="the dial cancelled")
            c = self.connect_uds(s, self.backend.port)
            self.assertTrue(self.get_over(c).endswith(b"hello from backend\n"))
            c.close()
        finally:
            hang.close()

    def test_tls_handshake_must_finish_within_the_header_timeout(self):
        s = self.up(uds=False, extra=["--http-header-timeout=500ms"])
        c = socket.create_connection(("127.0.0.1", s.server_port), timeout=10)
        try:
            self.assertEqual(c.recv(4096), b"")  # closed, no handshake ever started
        except ConnectionResetError:
            pass
        c.close()
        self.assertEqual(s.metric('sluice_tunnel_server_limited_total{limit="header_timeout"}'), 1)

    def test_dial_timeout_is_504_and_agent_loss_is_502(self):
        s = self.env.server(mode="http-connect")
        a = self.env.agent(s)
        h.wait_until(s.ready)
        hang = h.HangingListener()
        try:
            out = uds_exchange(s.uds, b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % hang.port,
                               timeout=10)
            self.assertTrue(out.startswith(b"HTTP/1.1 504 "), out)
            self.assertTrue(out.endswith(b": i/o timeout"), out)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(5)
            c.connect(s.uds)
            c.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % hang.port)
            h.wait_until(lambda: s.metric(
                "konnectivity_network_proxy_server_pending_backend_dials") == 1)
            a.proc.stop()
            out = c.recv(4096)
            c.close()
            self.assertTrue(out.startswith(b"HTTP/1.1 502 "), out)
        finally:
            hang.close()

    def test_slow_reader_is_paused_not_cut(self):
        # A client slower than the backend must get every byte: the server holds the agent
        # stream (per-connection pause) instead of closing at the 16 MiB queue bound.
        s = self.up()
        n = 48 << 20
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(s.uds)
        c.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n"
                  b"GET /bytes/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                  % (self.backend.port, n))
        data = bytearray()
        while True:
            b = c.recv(65536)
            if not b:
                break
            data += b
            time.sleep(0.0005)
        c.close()
        body = bytes(data).split(b"\r\n\r\n", 2)[2]
        self.assertEqual(len(body), n)
        self.assertEqual(hashlib.sha256(body).hexdigest(), h.sha256(h.expected_bytes(n)))

    def test_no_agent(self):
        s = self.up(agent=False)
        out = uds_exchange(s.uds, b"CONNECT 127.0.0.1:80 HTTP/1.1\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 500 "), out)
        self.assertTrue(out.endswith(b"\r\n\r\ncurrently no tunnels available: No agent available"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
