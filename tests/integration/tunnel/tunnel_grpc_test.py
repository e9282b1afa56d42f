# SPDX-License-Identifier: Apache-2.0
"""Konnectivity contract scenarios through the gRPC frontend (ProxyService), driven by a
Python grpcio client, against real sluice-tunnel-server and sluice-proxy-agent processes."""

import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import grpc

import tunnel_harness as h
from tunnel_harness import pb


class GrpcTunnelTest(h.TestCase):
    def setUp(self):
        super().setUp()
        self.backend = h.Backend()
        self.addCleanup(self.backend.stop)

    def up(self, **kw):
        s = self.env.server(**kw)
        a = self.env.agent(s)
        h.wait_until(s.ready, what="server ready")
        h.wait_until(a.ready, what="agent ready")
        return s, a

    def target(self, path=""):
        return "127.0.0.1:%d" % self.backend.port

    def test_dial_data_close_over_uds(self):
        s, a = self.up()
        self.assertEqual(oct(os.stat(s.uds).st_mode & 0o777), "0o770")
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target(), random=42)
        self.assertEqual(rsp.error, "")
        self.assertEqual(rsp.random, 42)
        self.assertEqual(rsp.connectID, 1)
        body = h.http_request(t, rsp.connectID, "/")
        self.assertIn(b"hello from backend", body)
        t.cancel()
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_established_connections") == 0)

    def test_slow_clients_leave_health_answering(self):
        # Issue 26, row 4, for both tunnel binaries: connections that never finish a request
        # (more than cpp-httplib's two handler threads) and probes still answered.
        s, a = self.up()
        slow = []
        for port in (s.health_port, a.health_port):
            for _ in range(4):
                c = socket.create_connection(("127.0.0.1", port))
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n")
                slow.append(c)
        try:
            for port in (s.health_port, a.health_port):
                for _ in range(3):
                    self.assertEqual(h.http_get("http://127.0.0.1:%d/healthz" % port)[0], 200)
        finally:
            for c in slow:
                c.close()

    def test_agent_port_survives_running_out_of_descriptors(self):
        # Issue 26, item 8: gRPC 1.51's own accept loop stops for good at the first EMFILE
        # (grpc/grpc#20418), locking every agent out until a restart. Ours pauses and resumes.
        s = self.env.server()
        pid = s.proc.p.pid
        fds = lambda: len(os.listdir("/proc/%d/fd" % pid))
        with open("/proc/%d/limits" % pid) as f:
            soft, hard = [l.split()[3:5] for l in f if l.startswith("Max open files")][0]
        subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:%s" % (fds() + 16, hard)],
                       check=True)
        flood = [socket.create_connection(("127.0.0.1", s.agent_port)) for _ in range(64)]
        h.wait_until(lambda: "Too many open files" in s.proc.output(), what="EMFILE at accept")
        for c in flood:
            c.close()
        subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%s:%s" % (soft, hard)], check=True)
        a = self.env.agent(s)
        h.wait_until(a.ready, timeout=20, what="an agent connected after the shortage")
        h.wait_until(s.ready, what="server ready")

    def test_explicit_close_gets_close_rsp(self):
        s, _ = self.up()
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target())
        t.close_req(rsp.connectID)
        p = t.recv(want=pb.CLOSE_RSP)
        self.assertEqual(p.closeResponse.connectID, rsp.connectID)
        t.cancel()

    def test_tcp_mtls_frontend(self):
        s, _ = self.up(uds=False)
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target())
        self.assertEqual(rsp.error, "")
        self.assertIn(b"hello", h.http_request(t, rsp.connectID, "/"))
        t.cancel()
        # Without a client certificate the handshake fails.
        creds = grpc.ssl_channel_credentials(open(self.env.certs.p("ca.crt"), "rb").read())
        ch = grpc.secure_channel("127.0.0.1:%d" % s.server_port, creds)
        with self.assertRaises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(ch).result(timeout=2)

    def test_dial_errors(self):
        s, _ = self.up()
        port = h.free_port()
        t = h.Tunnel(s.channel())
        rsp = t.dial("127.0.0.1:%d" % port)
        self.assertEqual(rsp.error, "dial tcp 127.0.0.1:%d: connect: connection refused" % port)
        self.assertEqual(rsp.connectID, 0)
        t.cancel()
        t = h.Tunnel(s.channel())
        self.assertEqual(t.dial("nosuchhost.invalid:80").error,
                         "dial tcp: lookup nosuchhost.invalid: no such host")
        t.cancel()

    def test_dial_timeout_and_dial_cancel(self):
        s, a = self.up()
        hang = h.HangingListener()
        try:
            t = h.Tunnel(s.channel())
            start = time.time()
            rsp = t.dial("127.0.0.1:%d" % hang.port)
            self.assertEqual(rsp.error, "dial tcp 127.0.0.1:%d: i/o timeout" % hang.port)
            # The agent's 5 s dial timeout; the upper bound allows for a loaded machine.
            elapsed = time.time() - start
            self.assertGreater(elapsed, 4.5)
            self.assertLess(elapsed, 10)
            t.cancel()
            # DIAL_CLS cancels a pending dial at the server and the agent.
            t = h.Tunnel(s.channel())
            t.send(pb.Packet(type=pb.DIAL_REQ, dialRequest=pb.DialRequest(
                protocol="tcp", address="127.0.0.1:%d" % hang.port, random=77)))
            h.wait_until(lambda: s.metric(
                "konnectivity_network_proxy_server_pending_backend_dials") == 1)
            t.send(pb.Packet(type=pb.DIAL_CLS, closeDial=pb.CloseDial(random=77)))
            h.wait_until(lambda: s.metric(
                "konnectivity_network_proxy_server_pending_backend_dials") == 0)
            time.sleep(5.5)  # past the agent's dial timeout: nothing may arrive
            with self.assertRaises(AssertionError):
                t.recv(timeout=0.2)
            t.cancel()
        finally:
            hang.close()

    def test_pending_dial_fails_when_agent_dies(self):
        s, a = self.up()
        hang = h.HangingListener()
        try:
            t = h.Tunnel(s.channel())
            t.send(pb.Packet(type=pb.DIAL_REQ, dialRequest=pb.DialRequest(
                protocol="tcp", address="127.0.0.1:%d" % hang.port, random=5)))
            h.wait_until(lambda: s.metric(
                "konnectivity_network_proxy_server_pending_backend_dials") == 1)
            a.proc.stop()
            # Upstream #126: never answered (the server has no dial timeout of its own), so the
            # recv timeout is the bound; generous for a loaded machine.
            rsp = t.recv(want=pb.DIAL_RSP, timeout=10).dialResponse
            self.assertEqual(rsp.random, 5)
            self.assertIn("agent disconnected", rsp.error)
            t.cancel()
        finally:
            hang.close()

    def test_no_agent(self):
        s = self.env.server()
        self.assertFalse(s.ready())
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target())
        self.assertEqual(rsp.error, "No agent available")
        t.cancel()

    def test_agent_streams_are_limited(self):
        s = self.env.server(extra=["--max-agents=1"])
        a = self.env.agent(s, name="agent-a")
        h.wait_until(a.ready, what="first agent")
        b = self.env.agent(s, name="agent-b")
        limited = 'sluice_tunnel_server_limited_total{limit="agents"}'
        h.wait_until(lambda: s.metric(limited) >= 1, what="second agent refused")
        self.assertFalse(b.ready())
        self.assertEqual(s.metric("konnectivity_network_proxy_server_ready_backend_connections"),
                         1)
        a.proc.stop()  # a slot frees: the refused agent's retry gets in
        h.wait_until(b.ready, what="second agent admitted")

    def test_agent_restart(self):
        s, a = self.up()
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target())
        a.proc.stop()
        p = t.recv(want=pb.CLOSE_RSP)
        self.assertEqual(p.closeResponse.connectID, rsp.connectID)
        t.cancel()
        h.wait_until(lambda: not s.ready(), what="server not ready")
        a2 = self.env.agent(s, name="agent2")
        h.wait_until(a2.ready, what="agent back")
        t = h.Tunnel(s.channel())
        self.assertEqual(t.dial(self.target()).error, "")
        t.cancel()

    def test_server_restart(self):
        s, a = self.up()
        s.proc.stop()
        h.wait_until(lambda: not a.ready(), what="agent notices")
        s2 = self.env.server(name="server", agent_port=s.agent_port, server_id="server-b")
        h.wait_until(s2.ready, what="agent reconnects")
        t = h.Tunnel(s2.channel())
        self.assertEqual(t.dial(self.target()).error, "")
        t.cancel()

    def test_20mib_transfer_checksum(self):
        s, _ = self.up()
        n = 20 << 20
        t = h.Tunnel(s.channel())
        rsp = t.dial(self.target())
        start = time.time()
        body = h.http_request(t, rsp.connectID, "/bytes/%d" % n)
        elapsed = time.time() - start
        payload = body.split(b"\r\n\r\n", 1)[1]
        self.assertEqual(len(payload), n)
        self.assertEqual(h.sha256(payload), h.sha256(h.expected_bytes(n)))
        print("20 MiB download: %.2fs" % elapsed)
        t.cancel()

    def test_100_concurrent_tunnels(self):
        s, a = self.up()
        ch = s.channel()
        results = []

        def one(i):
            t = h.Tunnel(ch)
            rsp = t.dial(self.target(), random=i + 1)
            body = h.http_request(t, rsp.connectID, "/bytes/100000")
            results.append(body.endswith(h.expected_bytes(100000)))
            t.cancel()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(100)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        self.assertEqual(results.count(True), 100)
        h.wait_until(lambda: a.metric("konnectivity_network_proxy_agent_open_endpoint_connections") == 0)

    def test_stalled_reader_does_not_slow_others(self):
        # Behind an agent without the window extension (upstream's protocol; with it the
        # stalled reader would pause only its own backend: tunnel_flow_test), the default
        # 16 MiB per-connection bound: the healthy 10 MiB transfer fits in it even if this
        # Python client reads slowly; the stalled 200 MiB one overflows and is closed.
        s = self.env.server()
        a = self.env.agent(s, extra=["--window-extension=false"])
        h.wait_until(s.ready)
        # A frontend that dials, asks for 200 MiB and never reads its stream.
        stalled = h.Tunnel(s.channel())
        rsp = stalled.dial(self.target(), random=7)
        stalled.reader = None
        stalled.data(rsp.connectID,
                     b"GET /bytes/209715200 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        # Stop consuming: the reader thread only runs when we call recv, so pause it by
        # holding the condition lock while others transfer.
        with stalled.rcv_cv:
            time.sleep(0.5)
            t = h.Tunnel(s.channel())
            r2 = t.dial(self.target(), random=8)
            start = time.time()
            body = h.http_request(t, r2.connectID, "/bytes/%d" % (10 << 20))
            elapsed = time.time() - start
            t.cancel()
            # The stalled stream held the agent stream at most ReadGate::kStallGrace, then
            # let go of it and overflowed its own bound.
            h.wait_until(lambda: s.metric(
                "sluice_tunnel_server_overflow_closes_total") >= 1, timeout=10)
        self.assertTrue(body.endswith(h.expected_bytes(10 << 20)))
        print("10 MiB beside a stalled reader: %.2fs" % elapsed)
        self.assertLess(elapsed, 10)
        stalled.cancel()

    def test_open_close_cycles_do_not_leak(self):
        s, a = self.up()
        ch = s.channel()

        def fds(proc):
            return len(os.listdir("/proc/%d/fd" % proc.p.pid))

        def rss(proc):
            with open("/proc/%d/status" % proc.p.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
            return 0

        def cycles(n, base, fresh=False):
            for i in range(n):
                # kube-apiserver opens one gRPC connection per proxied TCP connection, so
                # some cycles pay a whole HTTP/2 connection each.
                c = s.channel() if fresh else ch
                t = h.Tunnel(c)
                rsp = t.dial(self.target(), random=base + i + 1)
                assert rsp.error == "", rsp.error
                t.close_req(rsp.connectID)
                t.recv(want=pb.CLOSE_RSP)
                t.cancel()
                if fresh:
                    c.close()

        cycles(200, 0)  # warm up pools and caches
        before = (fds(s.proc), fds(a.proc), rss(s.proc), rss(a.proc))
        total = int(os.environ.get("SLUICE_TUNNEL_CYCLES", "10000"))
        workers = 8
        start = time.time()
        threads = [threading.Thread(target=cycles,
                                    args=(total // workers, 1000000 * (w + 1), w == 0))
                   for w in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        print("%d open/close cycles: %.1fs" % (total, time.time() - start))
        h.wait_until(lambda: a.metric("konnectivity_network_proxy_agent_open_endpoint_connections") == 0)
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_established_connections") == 0)
        # Sockets close a moment after the gauges drop: wait for the fd counts (a leak keeps
        # them up and fails below after the timeout).
        try:
            h.wait_until(lambda: fds(s.proc) <= before[0] + 5 and fds(a.proc) <= before[1] + 5,
                         timeout=10)
        except AssertionError:
            pass
        after = (fds(s.proc), fds(a.proc), rss(s.proc), rss(a.proc))
        print("fds/rss before", before, "after", after)
        self.assertLessEqual(after[0], before[0] + 5)
        self.assertLessEqual(after[1], before[1] + 5)
        # ASan's quarantine holds freed memory, so sanitizer builds raise the RSS slack.
        slack = int(os.environ.get("SLUICE_TUNNEL_RSS_SLACK_KIB", "30000"))
        self.assertLess(after[2], before[2] + slack)
        self.assertLess(after[3], before[3] + slack)
        # Graceful shutdown: exit 0, and under ASan no leak or memory error reports.
        s.proc.signal(signal.SIGTERM)
        a.proc.signal(signal.SIGINT)
        self.assertEqual(s.proc.p.wait(timeout=20), 0)
        self.assertEqual(a.proc.p.wait(timeout=20), 0)
        for p in (s.proc, a.proc):
            self.assertNotIn("Sanitizer", p.output())

    def test_bad_input(self):
        s, _ = self.up()
        ch = s.channel()
        # DATA before any dial.
        t = h.Tunnel(ch)
        t.data(5, b"x")
        p = t.recv(want=pb.CLOSE_RSP)
        self.assertEqual(p.closeResponse.error, "backend not initialized")
        # CLOSE for an unknown ID, an unknown type (ignored), then a dial still works.
        t.close_req(99)
        self.assertEqual(t.recv(want=pb.CLOSE_RSP).closeResponse.connectID, 99)
        t.send(pb.Packet(type=42))
        rsp = t.dial(self.target(), random=3)
        self.assertEqual(rsp.error, "")
        # A second DIAL on the same stream is refused.
        self.assertNotEqual(t.dial(self.target(), random=4).error, "")
        self.assertIn(b"hello", h.http_request(t, rsp.connectID, "/"))
        t.cancel()
        # Malformed protobuf and an oversized message fail only their own stream.
        for raw in (b"\xff\xff\xff\xff", pb.Packet(type=pb.DATA, data=pb.Data(
                connectID=1, data=b"x" * (5 << 20))).SerializeToString()):
            bad = h.Tunnel(ch)
            bad.send(raw)
            self.assertIsNone(bad.recv())
        t = h.Tunnel(ch)
        self.assertEqual(t.dial(self.target(), random=5).error, "")
        t.cancel()

    def test_drain(self):
        s, a = self.up()
        a.proc.signal(signal.SIGTERM)
        # Draining, not stopping: the server has the agent's DRAIN, and the agent still runs.
        h.wait_until(lambda: "is draining" in s.proc.output(), what="the server to see DRAIN")
        self.assertTrue(a.proc.alive())
        t = h.Tunnel(s.channel())  # a draining agent is still used when it is the only one
        self.assertEqual(t.dial(self.target()).error, "")
        t.cancel()
        a2 = self.env.agent(s, name="agent2")
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_ready_backend_connections") == 2)
        for i in range(10):
            t = h.Tunnel(s.channel())
            self.assertEqual(t.dial(self.target(), random=10 + i).error, "")
            t.cancel()
        self.assertIsNone(a.metric("konnectivity_network_proxy_agent_dial_duration_seconds_count") and None)
        self.assertEqual(a2.metric("konnectivity_network_proxy_agent_dial_duration_seconds_count"), 10)
        a.proc.signal(signal.SIGTERM)
        a.proc.p.wait(timeout=10)

    def test_two_servers_server_count_2(self):
        # Both servers share one agent port (gRPC listens with SO_REUSEPORT), so the kernel
        # spreads the agent's connections like a load balancer would.
        port = h.free_port()
        s1 = self.env.server(name="s1", agent_port=port, extra=["--server-count=2"])
        s2 = self.env.server(name="s2", agent_port=port, extra=["--server-count=2"])
        a = self.env.agent(s1)
        h.wait_until(lambda: s1.ready() and s2.ready(), timeout=30, what="both servers")
        h.wait_until(lambda: a.metric("konnectivity_network_proxy_agent_open_server_connections") == 2)
        for s in (s1, s2):
            t = h.Tunnel(s.channel())
            self.assertEqual(t.dial(self.target()).error, "")
            t.cancel()

    def test_dest_host_strategy(self):
        s = self.env.server(extra=["--proxy-strategies=destHost,default"])
        a1 = self.env.agent(s, name="a1", extra=["--agent-identifiers=ipv4=127.0.0.1"])
        a2 = self.env.agent(s, name="a2", extra=["--agent-identifiers=host=other"])
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_ready_backend_connections") == 2)
        for i in range(6):
            t = h.Tunnel(s.channel())
            self.assertEqual(t.dial(self.target(), random=i + 1).error, "")
            t.cancel()
        self.assertEqual(a1.metric("konnectivity_network_proxy_agent_dial_duration_seconds_count"), 6)


if __name__ == "__main__":
    unittest.main(verbosity=2)
