# SPDX-License-Identifier: Apache-2.0
"""Agent authentication on sluice-tunnel-server's agent port: a static token file, and
service-account tokens checked with TokenReview against the test API server of the kube source's
tests (tests/integration/kube/fake_apiserver.py: TLS, and it requires the tunnel server's own
bearer token, as a real API server would)."""

import base64
import json
import os
import subprocess
import threading
import unittest
import urllib.request

import grpc

import tunnel_harness as h

FAKE_APISERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube",
                              "fake_apiserver.py")
NAMESPACE, ACCOUNT, AUDIENCE = "kube-system", "konnectivity-agent", "system:konnectivity-server"
SA_FLAGS = ["--agent-namespace=" + NAMESPACE, "--agent-service-account=" + ACCOUNT,
            "--authentication-audience=" + AUDIENCE]
SA_USER = "system:serviceaccount:%s:%s" % (NAMESPACE, ACCOUNT)
NODE_CLAIM = "authentication.kubernetes.io/node-name"


def jwt(name, **claims):
    """A token shaped as a service-account JWT (the server refuses others before any review);
    only the test API server knows whether it is valid."""
    def b64(obj):
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return "%s.%s.%s" % (b64({"alg": "RS256", "kid": "test"}), b64(dict(sub=name, **claims)),
                         b64({"sig": name}))


class ApiServer:
    """fake_apiserver.py over TLS; the tunnel server reaches it through a kubeconfig. In
    network namespace `netns` if given (then controlled through curl)."""

    SERVER_TOKEN = "tunnel-server-credential"

    def __init__(self, env, netns=None):
        self.netns = netns
        ports = os.path.join(env.dir, "api-ports.json")
        tls = os.path.join(env.dir, "api-tls")
        os.mkdir(tls)
        self.proc = h.Proc(h.in_netns(netns, ["/usr/bin/python3", FAKE_APISERVER, "--ports-file",
                                              ports, "--tls-dir", tls]),
                           os.path.join(env.dir, "apiserver.log"))
        env.procs.append(self.proc)
        h.wait_until(lambda: os.path.exists(ports), what="test API server")
        with open(ports) as f:
            p = json.load(f)
        self.control_port = p["control"]
        self.kubeconfig = os.path.join(env.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {{server: "https://127.0.0.1:{p["api"]}", certificate-authority: "{tls}/ca.crt"}}
users:
- name: tunnel-server
  user: {{token: "{self.SERVER_TOKEN}"}}
contexts:
- name: test
  context: {{cluster: test, user: tunnel-server}}
current-context: test
""")
        self.control({"op": "auth", "tokens": [self.SERVER_TOKEN]})

    def control(self, op):
        url = "http://127.0.0.1:%d/control" % self.control_port
        if self.netns:
            r = subprocess.run(h.in_netns(self.netns, ["curl", "-sf", "-m", "5", "--data-binary",
                                                       json.dumps(op), url]),
                               capture_output=True, check=True, timeout=10)
            return json.loads(r.stdout)
        req = urllib.request.Request(url, data=json.dumps(op).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def reviews(self):
        """(status, authorization) of each TokenReview the API server was sent."""
        lines = h.http_get("http://127.0.0.1:%d/control/requests" % self.control_port,
                           netns=self.netns)[1].splitlines()
        out = []
        for line in lines:
            f = line.split(" ", 4)
            if len(f) == 5 and f[2] == "POST" and "tokenreviews" in f[3]:
                out.append((int(f[1]), f[4]))
        return out


def review_count(server, outcome):
    return server.metric('sluice_tunnel_server_token_reviews_total{outcome="%s"}' % outcome) or 0


class NetNs:
    """Network namespace `name`-PID with lo up and a veth to the test's own namespace: the
    namespace side is 10.250.0.1/30, the test's side 10.250.0.2/30."""

    INSIDE, OUTSIDE = "10.250.0.1", "10.250.0.2"

    def __init__(self, name):
        self.name = "%s-%d" % (name, os.getpid())
        self.veth = "sl%d" % os.getpid()
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        try:
            for cmd in (["-n", self.name, "link", "set", "lo", "up"],
                        ["link", "add", self.veth, "type", "veth", "peer", "name", "in0",
                         "netns", self.name],
                        ["addr", "add", self.OUTSIDE + "/30", "dev", self.veth],
                        ["link", "set", self.veth, "up"],
                        ["-n", self.name, "addr", "add", self.INSIDE + "/30", "dev", "in0"],
                        ["-n", self.name, "link", "set", "in0", "up"]):
                subprocess.run(["ip"] + cmd, check=True)
        except Exception:
            self.close()
            raise

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)  # takes the veth along


class JunkPeer:
    """Opens `n` agent streams at once from the test's namespace, each with a well-formed,
    unexpired JWT the API server does not know, and leaves them waiting for their verdicts."""

    def __init__(self, env, address, n):
        c = env.certs
        creds = grpc.ssl_channel_credentials(open(c.p("ca.crt"), "rb").read(),
                                             open(c.p("agent.key"), "rb").read(),
                                             open(c.p("agent.crt"), "rb").read())
        # The server's certificate names localhost and 127.0.0.1, not the veth address.
        self.channel = grpc.secure_channel(address, creds, options=[
            ("grpc.ssl_target_name_override", "localhost")])
        connect = self.channel.stream_stream("/AgentService/Connect",
                                             request_serializer=lambda m: m,
                                             response_deserializer=lambda b: b)
        self.calls = []
        self.done = threading.Event()
        for i in range(n):
            call = connect(self._idle(), metadata=(
                ("agentid", "junk-%d" % i), ("authorization", "Bearer " + jwt("junk-%d" % i))))
            self.calls.append(call)

    def _idle(self):
        self.done.wait()
        return
        yield  # a generator that sends nothing

    def close(self):
        self.done.set()
        for c in self.calls:
            c.cancel()
        self.channel.close()


class AgentAuthTest(h.TestCase):
    def token_file(self, name, token):
        path = os.path.join(self.env.dir, name)
        with open(path, "w") as f:
            f.write(token + "\n")
        return path

    def agent(self, server, name, token=None, extra=(), **kw):
        extra = list(extra) + (
            ["--service-account-token-path=" + self.token_file(name + ".token", token)]
            if token is not None else [])
        return self.env.agent(server, name=name, extra=extra, **kw)

    def wait_refused(self, agents):
        """Until every agent has been refused twice (refused, backed off, refused again)."""
        for a in agents:
            h.wait_until(lambda: a.proc.output().count("connect to proxy server failed") >= 2,
                         what="refusals of " + a.proc.argv[0])

    def test_token_file(self):
        tokens = os.path.join(self.env.dir, "tokens")
        with open(tokens, "w") as f:
            f.write("# agents\ngood-token,a-good\n")
        s = self.env.server(extra=["--agent-token-file=" + tokens])
        bad = self.agent(s, "a-bad", "wrong")
        wrong_id = self.agent(s, "a-wrong-id", "good-token")
        no_cert = self.agent(s, "a-good", "good-token", cert=False)
        self.wait_refused([bad, wrong_id, no_cert])
        self.assertFalse(s.ready())
        self.assertFalse(bad.ready() or wrong_id.ready() or no_cert.ready())
        good = self.agent(s, "a-good2", "good-token", agent_id="a-good")
        h.wait_until(good.ready, what="good agent")

    def test_service_account_tokens(self):
        api = ApiServer(self.env)
        user = SA_USER
        api.control({"op": "sa_tokens", "tokens": {
            jwt("good"): {"username": user, "audiences": [AUDIENCE]},
            jwt("apiserver-audience"): {"username": user,
                                        "audiences": ["https://kubernetes.default.svc"]},
            jwt("other-account"): {"username": "system:serviceaccount:%s:default" % NAMESPACE,
                                   "audiences": [AUDIENCE]},
            jwt("other-namespace"): {"username": "system:serviceaccount:default:" + ACCOUNT,
                                     "audiences": [AUDIENCE]},
            jwt("a-user"): {"username": "jane", "audiences": [AUDIENCE]},
        }})
        s = self.env.server(cluster_ca=False, extra=SA_FLAGS + ["--kubeconfig=" + api.kubeconfig])
        refused = {name: self.agent(s, name, jwt(token)) for name, token in (
            ("unknown", "nobody"), ("aud", "apiserver-audience"), ("sa", "other-account"),
            ("ns", "other-namespace"), ("user", "a-user"))}
        refused["none"] = self.agent(s, "none")  # no token at all
        # Refused before any review: not a JWT, or expired by its exp claim.
        refused["junk"] = self.agent(s, "junk", "good")
        refused["expired"] = self.agent(s, "expired", jwt("good", exp=1000000000))
        self.wait_refused(refused.values())
        self.assertFalse(s.ready())
        self.assertFalse(any(a.ready() for a in refused.values()))
        # Each refusal says why, and reviews carry the server's own credential, not the agent's.
        log = s.proc.output()
        for reason in ("invalid bearer token", "invalid for the target audiences", "kube-system/default",
                       "default/konnectivity-agent", "\"jane\" is not a service account",
                       "no bearer token", "bearer token is not a JWT", "bearer token expired"):
            self.assertIn(reason, log)
        self.assertTrue(all(auth == "Bearer " + ApiServer.SERVER_TOKEN
                            for _, auth in api.reviews()))
        good = self.agent(s, "good", jwt("good"))
        h.wait_until(good.ready, what="agent with a good token")
        h.wait_until(s.ready, what="server ready")
        # Refusals are remembered a while: the refused agents' retries are answered without
        # asking the API server again.
        self.assertGreater(review_count(s, "cache_refused"), 0)
        self.assertGreater(review_count(s, "precheck_refused"), 0)

    def test_junk_tokens_from_one_peer_do_not_delay_a_good_agent(self):
        # Server, API server and the good agent in a namespace; the junk peer reaches the agent
        # port over a veth from the test's namespace, so it is another address than the agent.
        ns = NetNs("sluice-auth")
        self.addCleanup(ns.close)
        api = ApiServer(self.env, netns=ns.name)
        api.control({"op": "sa_tokens", "tokens": {
            jwt("good"): {"username": SA_USER, "audiences": [AUDIENCE]}}})
        # One review a second: 40 junk tokens queued ahead of the agent's would take 40 s.
        s = self.env.server(cluster_ca=False, netns=ns.name, extra=SA_FLAGS + [
            "--kubeconfig=" + api.kubeconfig, "--kubeconfig-qps=1", "--kubeconfig-burst=1",
            "--agent-bind-address=0.0.0.0"])
        junk = JunkPeer(self.env, "%s:%d" % (NetNs.INSIDE, s.agent_port), 40)
        self.addCleanup(junk.close)
        h.wait_until(lambda: len(api.reviews()) >= 1, what="the first junk review")
        good = self.agent(s, "good", jwt("good"), netns=ns.name)
        h.wait_until(good.ready, what="the good agent admitted while junk is pending")
        # The junk peer got its per-address share of the queue; the rest was refused at once.
        self.assertGreater(review_count(s, "peer_limit"), 0)
        # Whatever the order, the junk peer never had more than its 8 reviews queued.
        self.assertLessEqual(len(api.reviews()), 8 + 2)

    def test_node_claim_binds_agent_identity(self):
        api = ApiServer(self.env)
        tokens = {}
        for node in ("node-a", "node-b"):
            tokens[node] = jwt(node)
            api.control({"op": "sa_tokens", "tokens": {
                t: {"username": SA_USER, "audiences": [AUDIENCE], "extra": {NODE_CLAIM: [n]}}
                for n, t in tokens.items()}})
        s = self.env.server(cluster_ca=False, extra=SA_FLAGS + ["--kubeconfig=" + api.kubeconfig])
        a = self.agent(s, "node-a", tokens["node-a"],
                       extra=["--agent-identifiers=host=node-a&ipv4=10.1.0.1"])
        h.wait_until(a.ready, what="node-a's agent")
        # node-b's token, but node-a's name, agent ID or address: refused.
        liars = [self.agent(s, "b-host", tokens["node-b"], extra=["--agent-identifiers=host=node-a"]),
                 self.agent(s, "b-id", tokens["node-b"], agent_id="node-a"),
                 self.agent(s, "b-ip", tokens["node-b"], extra=["--agent-identifiers=ipv4=10.1.0.1"])]
        self.wait_refused(liars)
        self.assertFalse(any(x.ready() for x in liars))
        log = s.proc.output()
        self.assertIn("identifier host=node-a is not the token's node node-b", log)
        self.assertIn("agent ID node-a is held by an agent of node node-a", log)
        self.assertIn("identifier 10.1.0.1 is claimed by an agent of node node-a", log)
        self.assertGreater(s.metric('sluice_tunnel_server_agent_refusals_total{reason="node_binding"}'), 0)
        b = self.agent(s, "node-b", tokens["node-b"], extra=["--agent-identifiers=host=node-b"])
        h.wait_until(b.ready, what="node-b's agent with its own identity")

    def test_api_server_trouble_delays_but_does_not_refuse_for_good(self):
        api = ApiServer(self.env)
        api.control({"op": "sa_tokens", "tokens": {
            jwt("good"): {"username": SA_USER, "audiences": [AUDIENCE]}}})
        # Two failed reviews (a 500, then a dropped connection) before the API server answers.
        api.control({"op": "fault", "verb": "create", "resource": "tokenreviews",
                     "status": 500, "count": 1})
        api.control({"op": "fault", "verb": "create", "resource": "tokenreviews",
                     "action": "reset", "count": 1})
        s = self.env.server(cluster_ca=False, extra=SA_FLAGS + ["--kubeconfig=" + api.kubeconfig])
        good = self.agent(s, "good", jwt("good"))
        h.wait_until(good.ready, what="agent admitted once the API server answers")
        self.assertGreaterEqual(len(api.reviews()), 3)
        self.assertIn("TokenReview: HTTP 500", s.proc.output())

    def test_bad_auth_flags_are_refused(self):
        c = self.env.certs
        base = [h.SERVER_BIN, "--uds-name=" + os.path.join(self.env.dir, "s.sock"),
                "--cluster-cert=" + c.p("server.crt"), "--cluster-key=" + c.p("server.key"),
                "--agent-port=0", "--health-port=0", "--admin-port=0"]
        for extra, message in (
                (["--agent-namespace=kube-system"], "--agent-service-account"),
                (SA_FLAGS + ["--cluster-ca-cert=" + c.p("ca.crt")], "--cluster-ca-cert"),
                (SA_FLAGS + ["--kubeconfig=/nonexistent"], "/nonexistent")):
            r = subprocess.run(base + extra, capture_output=True, timeout=20)
            out = r.stdout.decode() + r.stderr.decode()
            self.assertNotEqual(r.returncode, 0, out)
            self.assertIn(message, out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
