# SPDX-License-Identifier: Apache-2.0
"""The tunnel agent's default --allowed-destinations: loopback and link-local destinations (cloud
metadata) are refused, as a closed port would be, although something listens there; listing
them opens them. 169.254.169.254 exists only inside a network namespace of the test's own, where
server, agent and a listener on that address run, so no dial can leave the machine."""

import os
import subprocess
import unittest

import tunnel_harness as h

METADATA = "169.254.169.254"
DENIED = "sluice_tunnel_agent_dials_denied_total"


def denied(agent, reason):
    return h.metric_value(agent._get("/metrics")[1], DENIED + '{reason="%s"}' % reason) or 0


class NetNs:
    """A network namespace named after the test's PID, with lo up and `addresses` on it."""

    def __init__(self, addresses):
        self.name = "sluice-allow-%d" % os.getpid()
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        self.ip("link", "set", "lo", "up")
        for a in addresses:
            self.ip("addr", "add", a, "dev", "lo")

    def ip(self, *args):
        subprocess.run(["ip", "-n", self.name] + list(args), check=True)

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)


class AllowTest(h.TestCase):
    def refused(self, server, address):
        t = h.Tunnel(server.channel())
        rsp = t.dial(address)
        t.cancel()
        return rsp.error

    def served(self, server, address, want):
        """Dials `address` through `server` and GETs / there; asserts the body holds `want`."""
        t = h.Tunnel(server.channel())
        rsp = t.dial(address)
        self.assertEqual(rsp.error, "")
        self.assertIn(want, h.http_request(t, rsp.connectID, "/"))
        t.cancel()

    def test_loopback_refused_by_default_and_open_when_listed(self):
        backend = h.Backend()
        self.addCleanup(backend.stop)
        target = "127.0.0.1:%d" % backend.port
        s = self.env.server(name="s-default")
        a = self.env.agent(s, name="a-default", allowed=None)
        h.wait_until(a.ready, what="agent ready")
        self.assertEqual(self.refused(s, target), "dial tcp %s: connect: connection refused" % target)
        # Its own status port, by any loopback address and by name.
        own = "localhost:%d" % a.health_port
        self.assertIn("connect: connection refused", self.refused(s, own))
        self.assertEqual(denied(a, "loopback"), 2)

        s2 = self.env.server(name="s-listed")
        b = self.env.agent(s2, name="a-listed", allowed="127.0.0.1/32:%d" % backend.port)
        h.wait_until(b.ready, what="agent ready")
        self.served(s2, target, b"hello from backend")
        # Listing one port opens that port only.
        self.assertIn("connection refused", self.refused(s2, "127.0.0.1:%d" % b.health_port))

    @unittest.skipUnless(h.NODE_AGENT_BIN, "needs sluice-agent ($SLUICE_AGENT)")
    def test_node_agents_own_ports_stay_closed_when_loopback_is_listed(self):
        backend = h.Backend()
        self.addCleanup(backend.stop)
        s = self.env.server(name="s-node")
        node = h.NodeAgent(self.env, s)  # --tunnel-allowed-destinations=127.0.0.0/8
        h.wait_until(lambda: node.readyz()[0] == 200, what="sluice-agent /readyz")
        self.served(s, "127.0.0.1:%d" % backend.port, b"hello from backend")
        # Its healthz and metrics ports open only to an entry that names them.
        for port in (node.health_port, node.metrics_port):
            target = "127.0.0.1:%d" % port
            self.assertEqual(self.refused(s, target),
                             "dial tcp %s: connect: connection refused" % target)
        self.assertEqual(node.metric(DENIED + '{reason="loopback"}'), 2)

    def test_metadata_address_refused_by_default_and_open_when_listed(self):
        ns = NetNs([METADATA + "/32"])
        self.addCleanup(ns.close)
        # Inside the namespace: an HTTP listener on the metadata address.
        backend = h.Proc(h.in_netns(ns.name, [
            "/usr/bin/python3", "-c",
            "import http.server as s\n"
            "class H(s.BaseHTTPRequestHandler):\n"
            "  def do_GET(self):\n"
            "    self.send_response(200); self.send_header('Content-Length','9');"
            " self.end_headers(); self.wfile.write(b'metadata\\n')\n"
            "s.HTTPServer(('%s', 80), H).serve_forever()\n" % METADATA]),
            os.path.join(self.env.dir, "metadata.log"))
        self.env.procs.append(backend)
        s = self.env.server(name="s-ns", netns=ns.name)
        a = self.env.agent(s, name="a-ns", allowed=None, netns=ns.name)
        h.wait_until(a.ready, what="agent ready")
        target = METADATA + ":80"
        self.assertEqual(self.refused(s, target),
                         "dial tcp %s: connect: connection refused" % target)
        self.assertEqual(denied(a, "link_local"), 1)
        a.proc.stop()
        ready = "konnectivity_network_proxy_server_ready_backend_connections"
        h.wait_until(lambda: s.metric(ready) == 0, what="the first agent gone")

        b = self.env.agent(s, name="a-ns-listed", allowed=METADATA + "/32:80", netns=ns.name)
        h.wait_until(lambda: b.ready() and s.metric(ready) == 1, what="agent ready")
        self.served(s, target, b"metadata")


if __name__ == "__main__":
    unittest.main(verbosity=2)
