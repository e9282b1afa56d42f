# SPDX-License-Identifier: Apache-2.0
"""The tunnel server's per-client caps, through the real binaries: a frontend client at
--max-tunnels-per-client gets a DIAL_RSP error at once, and a slot again when a tunnel closes."""

import unittest

import tunnel_harness as h

LIMITED = "sluice_tunnel_server_limited_total"
ESTABLISHED = "konnectivity_network_proxy_server_established_connections"


class LimitsTest(h.TestCase):
    def test_tunnels_per_client(self):
        backend = h.Backend()
        self.addCleanup(backend.stop)
        target = "127.0.0.1:%d" % backend.port
        s = self.env.server(extra=["--max-tunnels-per-client=2"])
        a = self.env.agent(s)
        h.wait_until(a.ready, what="agent ready")
        ch = s.channel()  # one client: the Unix socket
        open_ = [h.Tunnel(ch), h.Tunnel(ch)]
        for i, t in enumerate(open_):
            self.assertEqual(t.dial(target, random=i + 1).error, "")
        over = h.Tunnel(ch)
        self.assertEqual(over.dial(target, random=3).error,
                         "too many open connections from this client")
        over.cancel()
        self.assertEqual(s.metric(LIMITED + '{limit="tunnels_per_client"}'), 1)
        open_[0].cancel()
        h.wait_until(lambda: s.metric(ESTABLISHED) == 1, what="one tunnel closed")
        again = h.Tunnel(ch)
        rsp = again.dial(target, random=4)
        self.assertEqual(rsp.error, "")
        self.assertIn(b"hello from backend", h.http_request(again, rsp.connectID, "/"))
        again.cancel()
        open_[1].cancel()


if __name__ == "__main__":
    unittest.main(verbosity=2)
