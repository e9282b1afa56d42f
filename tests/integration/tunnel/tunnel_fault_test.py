# SPDX-License-Identifier: Apache-2.0
"""Fault matrix, tunnel rows (docs/operations.md, "Fault behaviour"): sluice-tunnel-server
killed with tunnels open and dials pending, then restarted; sluice-proxy-agent killed with
dials pending and tunnels open. Every frontend gets an answer or an error instead of a hang,
and each surviving process frees what it held: its descriptor count returns to its baseline."""

import os
import time
import unittest

import grpc

import tunnel_harness as h
from tunnel_harness import pb

OPEN_ENDPOINTS = "konnectivity_network_proxy_agent_open_endpoint_connections"
AGENT_DIAL_TIMEOUTS = 'konnectivity_network_proxy_agent_endpoint_dial_failure_total{reason="timeout"}'
PENDING = "konnectivity_network_proxy_server_pending_backend_dials"
ESTABLISHED = "konnectivity_network_proxy_server_established_connections"
READY_BACKENDS = "konnectivity_network_proxy_server_ready_backend_connections"
# Descriptors a process may open beyond its baseline without holding anything of a test's
# connections: gRPC's lazily created wakeup fds and a reconnecting channel.
FD_SLACK = 4


def fds(proc):
    return len(os.listdir("/proc/%d/fd" % proc.p.pid))


def baseline_fds(proc, settle=0.5):
    """The fewest descriptors seen over `settle` seconds: the connection of a health or
    metrics request just answered may still be open at any single look."""
    least = fds(proc)
    deadline = time.time() + settle
    while time.time() < deadline:
        time.sleep(0.05)
        least = min(least, fds(proc))
    return least


def metric0(getter, name):
    """A metric that is absent until first incremented reads as 0."""
    value = getter(name)
    return 0 if value is None else value


class TunnelFaultTest(h.TestCase):
    def setUp(self):
        super().setUp()
        self.backend = h.Backend()
        self.addCleanup(self.backend.stop)
        self.hang = h.HangingListener()  # dials to it stay pending
        self.addCleanup(self.hang.close)

    def target(self):
        return "127.0.0.1:%d" % self.backend.port

    def open_tunnels(self, s, established=3, pending=3):
        """Open tunnels and dials the agent cannot complete, each on its own stream."""
        ch = s.channel()
        tunnels = []
        for i in range(established):
            t = h.Tunnel(ch)
            rsp = t.dial(self.target(), random=i + 1)
            self.assertEqual(rsp.error, "")
            # A kept-alive HTTP connection: it carried a reply and stays open.
            t.data(rsp.connectID, b"GET /bytes/1000 HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(t.recv(want=pb.DATA).type, pb.DATA)
            tunnels.append(t)
        for i in range(pending):
            t = h.Tunnel(ch)
            t.send(pb.Packet(type=pb.DIAL_REQ, dialRequest=pb.DialRequest(
                protocol="tcp", address="127.0.0.1:%d" % self.hang.port, random=100 + i)))
            tunnels.append(t)
        h.wait_until(lambda: s.metric(PENDING) == pending, what="dials pending")
        return ch, tunnels

    def test_server_killed_with_tunnels_open_then_restarted(self):
        self.server_killed_with_tunnels_open_then_restarted(self.env.agent, lambda a: a.ready())

    @unittest.skipUnless(h.NODE_AGENT_BIN, "SLUICE_AGENT not set")
    def test_server_killed_then_restarted_under_sluice_agent(self):
        # The same tunnel agent hosted by sluice-agent (--tunnel-server-address).
        self.server_killed_with_tunnels_open_then_restarted(
            lambda s: h.NodeAgent(self.env, s), lambda a: a.readyz()[0] == 200)

    def server_killed_with_tunnels_open_then_restarted(self, start_agent, ready):
        s = self.env.server()
        a = start_agent(s)
        h.wait_until(lambda: ready(a), what="agent ready")
        agent_baseline = baseline_fds(a.proc)
        ch, tunnels = self.open_tunnels(s)
        h.wait_until(lambda: a.metric(OPEN_ENDPOINTS) == 3, what="endpoints open")
        # Three endpoint connections and three dialling sockets: the count below means something.
        h.wait_until(lambda: fds(a.proc) >= agent_baseline + 6,
                     what="agent holds the tunnels' descriptors (baseline %d)" % agent_baseline)

        start = time.time()
        s.proc.stop()  # SIGKILL
        # Every frontend stream ends with an error: none is left waiting on a dead server.
        for t in tunnels:
            while t.recv(timeout=20) is not None:
                pass
            self.assertIsInstance(getattr(t, "error", None), grpc.RpcError)
            self.assertEqual(t.error.code(), grpc.StatusCode.UNAVAILABLE)
        print("server killed: every frontend saw its stream fail after %.2fs"
              % (time.time() - start))
        ch.close()
        # The agent closes its endpoint connections and abandons its pending dials at once:
        # they never reach the 5 s dial timeout.
        h.wait_until(lambda: a.metric(OPEN_ENDPOINTS) == 0, what="endpoints closed")
        h.wait_until(lambda: fds(a.proc) <= agent_baseline + FD_SLACK,
                     what="agent fds back to baseline (%d)" % agent_baseline)
        self.assertEqual(metric0(a.metric, AGENT_DIAL_TIMEOUTS), 0)
        print("agent fds: baseline %d, after the server's loss %d" % (agent_baseline, fds(a.proc)))

        s2 = self.env.server(name="server2", agent_port=s.agent_port, server_id="server-b")
        h.wait_until(s2.ready, timeout=30, what="agent reconnects")
        h.wait_until(lambda: ready(a), what="agent ready again")
        print("server restarted: agent connected again after %.2fs" % (time.time() - start))
        ch2 = s2.channel()
        t = h.Tunnel(ch2)
        rsp = t.dial(self.target(), random=7)
        self.assertEqual(rsp.error, "")
        self.assertTrue(h.http_request(t, rsp.connectID, "/bytes/100000")
                        .endswith(h.expected_bytes(100000)))
        t.cancel()
        ch2.close()
        h.wait_until(lambda: a.metric(OPEN_ENDPOINTS) == 0)
        h.wait_until(lambda: fds(a.proc) <= agent_baseline + FD_SLACK,
                     what="agent fds back to baseline after the new tunnel")

    def test_agent_killed_with_dials_pending_and_tunnels_open(self):
        s = self.env.server()
        # Baseline: the server with one frontend connection made and closed (gRPC's lazily
        # created descriptors exist), before any agent connects.
        warm = s.channel()
        t = h.Tunnel(warm)
        self.assertEqual(t.dial(self.target()).error, "No agent available")
        t.cancel()
        warm.close()
        h.wait_until(lambda: s.metric("konnectivity_network_proxy_server_grpc_connections"
                                      '{service_method="Proxy"}') == 0)
        server_baseline = baseline_fds(s.proc)
        a = self.env.agent(s)
        h.wait_until(s.ready, what="server ready")
        ch, tunnels = self.open_tunnels(s)
        established, pending = tunnels[:3], tunnels[3:]
        h.wait_until(lambda: s.metric(ESTABLISHED) == 3)
        h.wait_until(lambda: fds(s.proc) > server_baseline + 1,  # the agent's and the frontends'
                     what="server holds the connections (baseline %d)" % server_baseline)

        start = time.time()
        a.proc.stop()  # SIGKILL
        # Pending dials are answered with an error, open tunnels closed: within a generous
        # bound, never a hang (upstream #126 left pending dials unanswered).
        for t in pending:
            rsp = t.recv(want=pb.DIAL_RSP, timeout=10).dialResponse
            self.assertIn("agent disconnected", rsp.error)
        for t in established:
            self.assertIsNotNone(t.recv(want=pb.CLOSE_RSP, timeout=10))
        print("agent killed: every frontend answered after %.2fs" % (time.time() - start))
        # The server freed the state of both, and a frontend stream stays usable.
        self.assertEqual(s.metric(PENDING), 0)
        self.assertEqual(s.metric(ESTABLISHED), 0)
        h.wait_until(lambda: s.metric(READY_BACKENDS) == 0)
        self.assertEqual(established[0].dial(self.target(), random=50).error,
                         "No agent available")
        for t in tunnels:
            t.cancel()
        ch.close()
        h.wait_until(lambda: fds(s.proc) <= server_baseline + FD_SLACK,
                     what="server fds back to baseline (%d)" % server_baseline)
        print("server fds: baseline %d, after %d" % (server_baseline, fds(s.proc)))


if __name__ == "__main__":
    unittest.main()
