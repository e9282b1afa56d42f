# SPDX-License-Identifier: Apache-2.0
"""Agent authentication on sluice-tunnel-server's agent port: a static token file, and
service-account tokens checked with TokenReview against the test API server of the kube source's
tests (tests/integration/kube/fake_apiserver.py: TLS, and it requires the tunnel server's own
bearer token, as a real API server would)."""

import json
import os
import subprocess
import unittest
import urllib.request

import tunnel_harness as h

FAKE_APISERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube",
                              "fake_apiserver.py")
NAMESPACE, ACCOUNT, AUDIENCE = "kube-system", "konnectivity-agent", "system:konnectivity-server"
SA_FLAGS = ["--agent-namespace=" + NAMESPACE, "--agent-service-account=" + ACCOUNT,
            "--authentication-audience=" + AUDIENCE]


class ApiServer:
    """fake_apiserver.py over TLS; the tunnel server reaches it through a kubeconfig."""

    SERVER_TOKEN = "tunnel-server-credential"

    def __init__(self, env):
        ports = os.path.join(env.dir, "api-ports.json")
        tls = os.path.join(env.dir, "api-tls")
        os.mkdir(tls)
        self.proc = h.Proc(["/usr/bin/python3", FAKE_APISERVER, "--ports-file", ports,
                            "--tls-dir", tls], os.path.join(env.dir, "apiserver.log"))
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
        req = urllib.request.Request("http://127.0.0.1:%d/control" % self.control_port,
                                     data=json.dumps(op).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def reviews(self):
        """(status, authorization) of each TokenReview the API server was sent."""
        with urllib.request.urlopen("http://127.0.0.1:%d/control/requests" % self.control_port,
                                    timeout=5) as r:
            lines = r.read().decode().splitlines()
        out = []
        for line in lines:
            f = line.split(" ", 4)
            if len(f) == 5 and f[2] == "POST" and "tokenreviews" in f[3]:
                out.append((int(f[1]), f[4]))
        return out


class AgentAuthTest(h.TestCase):
    def token_file(self, name, token):
        path = os.path.join(self.env.dir, name)
        with open(path, "w") as f:
            f.write(token + "\n")
        return path

    def agent(self, server, name, token=None, **kw):
        extra = ["--service-account-token-path=" + self.token_file(name + ".token", token)] \
            if token is not None else []
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
        user = "system:serviceaccount:%s:%s" % (NAMESPACE, ACCOUNT)
        api.control({"op": "sa_tokens", "tokens": {
            "good": {"username": user, "audiences": [AUDIENCE]},
            "apiserver-audience": {"username": user,
                                   "audiences": ["https://kubernetes.default.svc"]},
            "other-account": {"username": "system:serviceaccount:%s:default" % NAMESPACE,
                              "audiences": [AUDIENCE]},
            "other-namespace": {"username": "system:serviceaccount:default:" + ACCOUNT,
                                "audiences": [AUDIENCE]},
            "a-user": {"username": "jane", "audiences": [AUDIENCE]},
        }})
        s = self.env.server(cluster_ca=False, extra=SA_FLAGS + ["--kubeconfig=" + api.kubeconfig])
        refused = {name: self.agent(s, name, token) for name, token in (
            ("unknown", "nobody"), ("aud", "apiserver-audience"), ("sa", "other-account"),
            ("ns", "other-namespace"), ("user", "a-user"))}
        refused["none"] = self.agent(s, "none")  # no token at all
        self.wait_refused(refused.values())
        self.assertFalse(s.ready())
        self.assertFalse(any(a.ready() for a in refused.values()))
        # Each refusal says why, and reviews carry the server's own credential, not the agent's.
        log = s.proc.output()
        for reason in ("invalid bearer token", "invalid for the target audiences", "kube-system/default",
                       "default/konnectivity-agent", "\"jane\" is not a service account",
                       "no bearer token"):
            self.assertIn(reason, log)
        self.assertTrue(all(auth == "Bearer " + ApiServer.SERVER_TOKEN
                            for _, auth in api.reviews()))
        good = self.agent(s, "good", "good")
        h.wait_until(good.ready, what="agent with a good token")
        h.wait_until(s.ready, what="server ready")

    def test_api_server_trouble_delays_but_does_not_refuse_for_good(self):
        api = ApiServer(self.env)
        api.control({"op": "sa_tokens", "tokens": {
            "good": {"username": "system:serviceaccount:%s:%s" % (NAMESPACE, ACCOUNT),
                     "audiences": [AUDIENCE]}}})
        # Two failed reviews (a 500, then a dropped connection) before the API server answers.
        api.control({"op": "fault", "verb": "create", "resource": "tokenreviews",
                     "status": 500, "count": 1})
        api.control({"op": "fault", "verb": "create", "resource": "tokenreviews",
                     "action": "reset", "count": 1})
        s = self.env.server(cluster_ca=False, extra=SA_FLAGS + ["--kubeconfig=" + api.kubeconfig])
        good = self.agent(s, "good", "good")
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
