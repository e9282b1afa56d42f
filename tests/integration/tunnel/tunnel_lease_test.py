# SPDX-License-Identifier: Apache-2.0
"""Upstream Konnectivity's server Leases against the test API server
(tests/integration/kube/fake_apiserver.py): sluice-tunnel-server --enable-lease-controller holds
its Lease and deletes expired ones; sluice-proxy-agent --count-server-leases connects to as many
servers as there are valid Leases."""

import datetime
import unittest

import tunnel_harness as h
from tunnel_auth_test import ApiServer

NS = "kube-system"
LABELS = {"k8s-app": "konnectivity-server"}


def lease(name, renewed, labels=None, holder="gone"):
    return {"metadata": {"name": name, "namespace": NS,
                         "labels": LABELS if labels is None else labels},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 30,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def now():
    return datetime.datetime.now(datetime.timezone.utc)


class LeaseTest(h.TestCase):
    def leases(self, api):
        return {o["metadata"]["name"]: o for o in
                api.control({"op": "objects", "resource": "leases"})["items"]}

    def server(self, api, server_id, agent_port=None):
        return self.env.server(name=server_id, server_id=server_id, agent_port=agent_port,
                               extra=["--enable-lease-controller", "--kubeconfig=" + api.kubeconfig])

    def test_server_holds_its_lease_and_culls_expired_ones(self):
        api = ApiServer(self.env)
        old = now() - datetime.timedelta(hours=1)
        api.control({"op": "put", "resource": "leases",
                     "object": lease("konnectivity-proxy-server-dead", old)})
        api.control({"op": "put", "resource": "leases",  # not ours to collect: another label
                     "object": lease("other-expired", old, labels={"app": "other"})})
        api.control({"op": "put", "resource": "leases",  # renewed: stays
                     "object": lease("konnectivity-proxy-server-alive", now())})
        s = self.server(api, "server-a")
        h.wait_until(lambda: "konnectivity-proxy-server-server-a" in self.leases(api),
                     what="the server's lease")
        h.wait_until(lambda: "konnectivity-proxy-server-dead" not in self.leases(api),
                     what="the expired lease deleted")
        held = self.leases(api)
        self.assertIn("other-expired", held)
        self.assertIn("konnectivity-proxy-server-alive", held)
        mine = held["konnectivity-proxy-server-server-a"]
        self.assertEqual(mine["metadata"]["labels"], LABELS)
        self.assertEqual(mine["spec"]["holderIdentity"], "server-a")
        self.assertEqual(mine["spec"]["leaseDurationSeconds"], 30)
        renewed = datetime.datetime.strptime(mine["spec"]["renewTime"],
                                             "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                                                 tzinfo=datetime.timezone.utc)
        self.assertLess(abs((now() - renewed).total_seconds()), 60)
        # Counted once the server has the API server's answer, after the deletion itself.
        culled = "konnectivity_network_proxy_server_culled_leases_count"
        h.wait_until(lambda: s.metric(culled) == 1, what="the culled lease counted")
        self.assertEqual(s.metric(culled), 1)

    def test_agent_counts_servers_from_leases(self):
        api = ApiServer(self.env)
        # Two servers on one agent port (SO_REUSEPORT: a stand-in for a load balancer), each
        # announcing the default --server-count=1: only the Leases tell the agent there are two.
        s1 = self.server(api, "server-1")
        s2 = self.server(api, "server-2", agent_port=s1.agent_port)
        h.wait_until(lambda: len(self.leases(api)) == 2, what="both servers' leases")
        a = self.env.agent(s1, extra=["--count-server-leases", "--kubeconfig=" + api.kubeconfig])
        connected = "konnectivity_network_proxy_agent_open_server_connections"
        known = "konnectivity_network_proxy_agent_known_server_count"
        h.wait_until(lambda: a.metric(connected) == 2, timeout=30,
                     what="the agent connected to both servers")
        self.assertEqual(a.metric(known), 2)
        for s in (s1, s2):
            h.wait_until(s.ready, what="both servers ready")
        # A third valid Lease raises the count as soon as the watch sees it; its deletion
        # lowers it again.
        api.control({"op": "put", "resource": "leases",
                     "object": lease("konnectivity-proxy-server-ghost", now())})
        h.wait_until(lambda: a.metric(known) == 3, what="the count following a new lease")
        api.control({"op": "delete", "resource": "leases", "namespace": NS,
                     "name": "konnectivity-proxy-server-ghost"})
        h.wait_until(lambda: a.metric(known) == 2, what="the count following a deletion")


if __name__ == "__main__":
    unittest.main()
