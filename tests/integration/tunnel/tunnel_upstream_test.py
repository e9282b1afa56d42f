# SPDX-License-Identifier: Apache-2.0
"""Drop-in checks against upstream Konnectivity v0.31: both binaries start and serve with every
upstream flag (upstream_flags_v0.31.txt), --help lists each of them with at most one default,
ignored flags warn once, klog's file flags work, --cipher-suites limits TLS 1.2, every
konnectivity_network_proxy_* metric matches upstream_metrics_v0.31.txt, and the command line
answers -h, bad flags and bad options as upstream's cobra commands do."""

import http.client
import os
import re
import socket
import ssl
import subprocess
import types
import unittest

import tunnel_harness as h

HERE = os.path.dirname(os.path.abspath(__file__))


def upstream_flags():
    """{section: [(name, default)]} from upstream_flags_v0.31.txt."""
    sections, cur = {}, None
    with open(os.path.join(HERE, "upstream_flags_v0.31.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                cur = sections.setdefault(line.strip("[]"), [])
                continue
            name, _, value = line[2:].partition("=")
            cur.append((name, value))
    return sections


def upstream_metrics():
    """{name: (type, {label: set of values or None for any}, help)}."""
    out = {}
    with open(os.path.join(HERE, "upstream_metrics_v0.31.txt")) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            name, typ, labels, help_text = line.rstrip("\n").split("\t")
            spec = {}
            if labels != "-":
                for part in labels.split(";"):
                    label, _, values = part.partition("=")
                    spec[label] = None if values == "*" else set(values.split(","))
            out[name] = (typ, spec, help_text)
    return out


def argv_with(binary, flags, overrides):
    """Every flag of `flags` once, with upstream's default unless overridden."""
    missing = set(overrides) - {n for n, _ in flags}
    assert not missing, "overrides for flags upstream does not have: %s" % missing
    return [binary] + ["--%s=%s" % (n, overrides.get(n, v)) for n, v in flags]


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """{family: {"type", "help", "samples": [(name, {labels})]}}."""
    fams = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            fams.setdefault(name, {"samples": []})["help"] = help_text
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            fams.setdefault(name, {"samples": []})["type"] = typ
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, "bad sample line: " + line
            name, labels = m.group(1), dict(LABEL.findall(m.group(2) or ""))
            fam = name
            if fam not in fams:
                fam = re.sub(r"_(bucket|sum|count)$", "", name)
            fams[fam]["samples"].append((name, labels))
    return fams


class UpstreamFlagsTest(h.TestCase):
    def start(self, binary, flags, overrides, name, path, health_port, extra=()):
        p = h.Proc(argv_with(binary, flags, overrides) + list(extra),
                   os.path.join(self.env.dir, name + ".log"))
        self.env.procs.append(p)
        h.wait_until(lambda: h.http_get("http://127.0.0.1:%d%s" % (health_port, path))[0] == 200,
                     what=name + " " + path)
        return p

    def start_pair(self, server_extra=None, agent_extra=None):
        flags = upstream_flags()
        c = self.env.certs
        uds = os.path.join(self.env.dir, "konnectivity.sock")
        self.agent_port, self.s_health, s_admin = h.free_port(), h.free_port(), h.free_port()
        server_over = {
            "uds-name": uds, "server-port": "0", "agent-port": self.agent_port,
            "agent-bind-address": "127.0.0.1", "admin-port": s_admin,
            "health-port": self.s_health, "health-bind-address": "127.0.0.1",
            "cluster-cert": c.p("server.crt"), "cluster-key": c.p("server.key"),
            "cluster-ca-cert": c.p("ca.crt"), "server-id": "upstream-flags-server"}
        server_over.update(server_extra or {})
        self.server = self.start(h.SERVER_BIN, flags["proxy-server"] + flags["klog"],
                                 server_over, "server", "/healthz", self.s_health)
        self.a_health = h.free_port()
        agent_over = {
            "proxy-server-host": "127.0.0.1", "proxy-server-port": self.agent_port,
            "ca-cert": c.p("ca.crt"), "agent-cert": c.p("agent.crt"),
            "agent-key": c.p("agent.key"), "health-server-host": "127.0.0.1",
            "health-server-port": self.a_health, "admin-server-port": h.free_port(),
            "agent-id": "upstream-flags-agent"}
        agent_over.update(agent_extra or {})
        # The one sluice flag: the backend listens on loopback, which sluice's agent (unlike
        # upstream's) refuses unless listed.
        self.agent = self.start(h.AGENT_BIN, flags["proxy-agent"] + flags["klog"], agent_over,
                                "agent", "/readyz", self.a_health,
                                extra=["--allowed-destinations=127.0.0.0/8"])
        self.uds = uds

    def test_both_start_and_serve_with_every_upstream_flag(self):
        self.start_pair()
        backend = h.Backend()
        self.addCleanup(backend.stop)
        t = h.Tunnel(h.grpc.insecure_channel("unix:" + self.uds))
        rsp = t.dial("127.0.0.1:%d" % backend.port)
        self.assertEqual(rsp.error, "")
        self.assertIn(b"hello from backend", h.http_request(t, rsp.connectID, "/"))
        t.cancel()
        for p in (self.server, self.agent):
            self.assertTrue(p.alive())
            # Upstream's defaults ask for nothing sluice ignores, so nothing is reported.
            self.assertNotIn("accepted for compatibility", p.output())

    def test_ignored_flags_warn_once_and_mapped_ones_apply(self):
        log_file = os.path.join(self.env.dir, "agent-klog.log")
        self.start_pair(
            server_extra={"enable-profiling": "true", "kubeconfig-qps": "20", "v": "1"},
            agent_extra={"warn-on-channel-limit": "true", "logtostderr": "false",
                         "log-file": log_file, "v": "1"})
        out = self.server.output()
        self.assertEqual(out.count("--enable-profiling is accepted for compatibility"), 1)
        self.assertNotIn("--kubeconfig-qps is accepted", out)  # mapped, not ignored
        # --logtostderr=false: the agent's lines go to --log-file, stderr stays quiet below
        # --stderrthreshold (ERROR).
        h.wait_until(lambda: "--warn-on-channel-limit is accepted" in open(log_file).read(),
                     what="warning in the agent's --log-file")
        self.assertNotIn("--warn-on-channel-limit", self.agent.output())

    def test_help_lists_every_upstream_flag_with_one_default(self):
        flags = upstream_flags()
        for binary, section in ((h.SERVER_BIN, "proxy-server"), (h.AGENT_BIN, "proxy-agent")):
            out = subprocess.run([binary, "--help"], capture_output=True, text=True,
                                 check=True).stdout
            listed = set(re.findall(r"^  --([a-z0-9-]+)", out, re.M))
            for name, _ in flags[section] + flags["klog"]:
                self.assertIn(name, listed, "%s --help lacks --%s" % (binary, name))
            for entry in re.split(r"\n(?=  --)", out):
                self.assertLessEqual(entry.count("(default"), 1, entry)

    def test_cipher_suites_limit_tls12(self):
        c = self.env.certs
        s = self.env.server(mode="http-connect", uds=False, extra=(
            "--cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",))

        def handshake(port, cipher):
            # The exit code says nothing here (gRPC drops a client without ALPN h2 after the
            # handshake); the negotiated cipher does.
            out = subprocess.run(
                ["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-tls1_2",
                 "-cipher", cipher, "-cert", c.p("agent.crt"), "-key", c.p("agent.key"),
                 "-CAfile", c.p("ca.crt")], stdin=subprocess.DEVNULL, capture_output=True,
                text=True, timeout=10).stdout
            return "Cipher is " + cipher in out

        for port in (s.agent_port, s.server_port):  # gRPC's TLS and the HTTP CONNECT one
            self.assertTrue(handshake(port, "ECDHE-RSA-AES128-GCM-SHA256"), port)
            self.assertFalse(handshake(port, "ECDHE-RSA-AES256-GCM-SHA384"), port)


class UpstreamMetricsTest(h.TestCase):
    def check(self, text, want):
        fams = parse_exposition(text)
        ours = {n: f for n, f in fams.items() if n.startswith("konnectivity_network_proxy_")}
        self.assertTrue(ours)
        for name, fam in ours.items():
            self.assertIn(name, want, "not an upstream metric: " + name)
            typ, spec, help_text = want[name]
            self.assertEqual(fam.get("type"), typ, name)
            self.assertEqual(fam.get("help"), help_text, name)
            for sample, labels in fam["samples"]:
                expect = set(spec) - ({"le"} if not sample.endswith("_bucket") else set())
                self.assertEqual(set(labels), expect, sample)
                for label, value in labels.items():
                    if spec[label] is not None:
                        self.assertIn(value, spec[label], "%s{%s}" % (sample, label))
        return fams

    def test_metrics_match_upstream(self):
        s = self.env.server()
        a = self.env.agent(s)
        h.wait_until(a.ready, what="agent ready")
        backend = h.Backend()
        self.addCleanup(backend.stop)
        t = h.Tunnel(s.channel())
        rsp = t.dial("127.0.0.1:%d" % backend.port)
        self.assertIn(b"hello from backend", h.http_request(t, rsp.connectID, "/"))
        t.cancel()
        t2 = h.Tunnel(s.channel())
        self.assertIn("connection refused", t2.dial("127.0.0.1:1", random=2).error)
        t2.cancel()
        # A frontend that cancels its stream (without half-closing it first) is upstream's
        # Recv error at the server.
        t3 = h.Tunnel(s.channel())
        self.assertEqual(t3.dial("127.0.0.1:%d" % backend.port, random=3).error, "")
        t3.responses.cancel()
        t3.done_writing()
        want = upstream_metrics()
        h.wait_until(lambda: 'stream_errors_total{segment="from_client"' in s.metrics(),
                     what="the server counting the cancelled Proxy streams")
        server = self.check(s.metrics(), want)
        agent = self.check(h.http_get("http://127.0.0.1:%d/metrics" % a.health_port)[1], want)
        # As upstream: only the two successful dials are in the dial histograms.
        for fams, prefix in ((server, "konnectivity_network_proxy_server_"),
                             (agent, "konnectivity_network_proxy_agent_")):
            count = prefix + "dial_duration_seconds_count"
            self.assertIn((count, {}), fams[prefix + "dial_duration_seconds"]["samples"])
        self.assertEqual(s.metric("konnectivity_network_proxy_server_dial_duration_seconds_count"),
                         2)
        self.assertEqual(a.metric("konnectivity_network_proxy_agent_dial_duration_seconds_count"),
                         2)
        self.assertGreater(
            s.metric("konnectivity_network_proxy_server_frontend_write_duration_seconds_count"), 0)
        self.assertEqual(s.metric("konnectivity_network_proxy_server_culled_leases_count"), 0)
        self.assertIn(("konnectivity_network_proxy_server_stream_errors_total",
                       {"segment": "from_client", "code": "Canceled", "packet_type": "Unknown"}),
                      server["konnectivity_network_proxy_server_stream_errors_total"]["samples"])
        packets = agent["konnectivity_network_proxy_agent_stream_packets_total"]["samples"]
        for segment, typ in (("to_agent", "DIAL_REQ"), ("from_agent", "DIAL_RSP"),
                             ("to_agent", "DATA"), ("from_agent", "DATA")):
            self.assertIn(("konnectivity_network_proxy_agent_stream_packets_total",
                           {"segment": segment, "packet_type": typ}), packets)
        self.assertIn(("konnectivity_network_proxy_agent_endpoint_dial_failure_total",
                       {"reason": "unknown"}),
                      agent["konnectivity_network_proxy_agent_endpoint_dial_failure_total"]
                      ["samples"])
        self.assertIn(("konnectivity_network_proxy_server_grpc_connections",
                       {"service_method": "Connect"}),
                      server["konnectivity_network_proxy_server_grpc_connections"]["samples"])
        # sluice's own metrics live under sluice_tunnel_*.
        self.assertIn("sluice_tunnel_server_bad_packets_total", server)
        self.assertIn("sluice_tunnel_agent_overflow_closes_total", agent)
        # The Go client's process collector, which upstream's binaries expose too.
        for fams in (server, agent):
            for name, typ in (("process_cpu_seconds_total", "counter"),
                              ("process_open_fds", "gauge"), ("process_max_fds", "gauge"),
                              ("process_virtual_memory_bytes", "gauge"),
                              ("process_virtual_memory_max_bytes", "gauge"),
                              ("process_resident_memory_bytes", "gauge"),
                              ("process_start_time_seconds", "gauge")):
                self.assertEqual(fams[name]["type"], typ, name)
                self.assertEqual(fams[name]["samples"], [(name, {})], name)


class CommandLineTest(unittest.TestCase):
    """Upstream's cobra: -h or --help anywhere among valid flags prints the help on stdout and
    exits 0; an unknown flag, a bad value or options that fail the checks exit 1 with
    "Error: ..." and then the usage on stderr. --version is sluice's (upstream has none)."""

    BINARIES = ((h.SERVER_BIN, "sluice-tunnel-server", ["--mode=http-connect"],
                 ["--mode=bogus"], "--mode"),
                (h.AGENT_BIN, "sluice-proxy-agent", ["--proxy-server-port=9000"],
                 ["--server-count-source=bogus"], "--server-count-source"))

    def run_binary(self, argv):
        return subprocess.run(argv, capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)

    def test_help_beside_other_flags(self):
        for binary, name, good, _, _ in self.BINARIES:
            for help_flag in ("-h", "--help"):
                r = self.run_binary([binary] + good + [help_flag, "--v=2"])
                self.assertEqual(r.returncode, 0, (name, help_flag, r.stderr))
                self.assertTrue(r.stdout.startswith("Usage: %s [flags]" % name), r.stdout[:200])
                self.assertIn("  -h, --help\n", r.stdout)
                self.assertEqual(r.stderr, "")

    def test_bad_flags_and_options_exit_one_with_error_then_usage(self):
        for binary, name, good, bad_option, option in self.BINARIES:
            for argv, error in (([binary, "--no-such-flag"], "Error: unknown flag --no-such-flag"),
                                ([binary] + good + ["--v=often"], "Error: invalid value"),
                                ([binary] + bad_option, "Error: " + option)):
                r = self.run_binary(argv)
                self.assertEqual(r.returncode, 1, (argv, r.stderr))
                self.assertTrue(r.stderr.startswith(error), (argv, r.stderr[:300]))
                self.assertIn("\nUsage: %s [flags]\n" % name, r.stderr)
                self.assertEqual(r.stdout, "")

    def test_version(self):
        for binary, name, _, _, _ in self.BINARIES:
            r = self.run_binary([binary, "--version"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"^%s \d+\.\d+\.\d+\n$" % name)
            # kube-proxy's --version=raw is not theirs.
            self.assertEqual(self.run_binary([binary, "--version=raw"]).returncode, 1)


class UpstreamOperatorViewTest(h.TestCase):
    """What an operator of upstream's binaries sees on the health ports and in the logs."""

    def test_readiness_texts_and_the_deprecated_ready_path(self):
        s = self.env.server()
        for path in ("/readyz", "/ready"):
            self.assertEqual(h.http_get("http://127.0.0.1:%d%s" % (s.health_port, path)),
                             (500, "no connection to any proxy agent"))
        nowhere = types.SimpleNamespace(agent_port=h.free_port())  # no server listens there
        lonely = self.env.agent(nowhere, name="lonely")
        not_ready = (503, "[+]ping ok\n[-]server-connected failed: no servers connected\n")
        for path in ("/readyz", "/ready"):
            h.wait_until(lambda: h.http_get("http://127.0.0.1:%d%s" % (lonely.health_port, path))
                         == not_ready, what="agent " + path + " before any server")
        a = self.env.agent(s)
        h.wait_until(a.ready, what="agent ready")
        for port in (s.health_port, a.health_port):
            for path in ("/readyz", "/ready"):
                self.assertEqual(h.http_get("http://127.0.0.1:%d%s" % (port, path)), (200, "ok"))

    def test_agent_admin_metrics_redirects_to_the_health_port(self):
        s = self.env.server()
        a = self.env.agent(s)
        h.wait_until(a.ready, what="agent ready")
        conn = http.client.HTTPConnection("127.0.0.1", a.admin_port, timeout=5)
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 301)
        self.assertEqual(r.getheader("Location"), "//127.0.0.1:%d/metrics" % a.health_port)
        # The connection stays open for the next request, as Go's server keeps it.
        conn.request("GET", "/metrics")
        self.assertEqual(conn.getresponse().status, 301)
        conn.close()
        # A client that follows redirects lands on the health port's metrics.
        status, body = h.http_get("http://127.0.0.1:%d/metrics" % a.admin_port)
        self.assertEqual(status, 200)
        self.assertIn("konnectivity_network_proxy_agent_open_server_connections", body)

    def test_agent_offers_alpn_protocols(self):
        # A TLS listener preferring "konnectivity" (as a load balancer routing by ALPN would)
        # agrees on it only if the agent offered it.
        c = self.env.certs
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(c.p("server.crt"), c.p("server.key"))
        ctx.set_alpn_protocols(["konnectivity"])
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        listener.settimeout(20)
        lb = types.SimpleNamespace(agent_port=listener.getsockname()[1])
        self.env.agent(lb, name="alpn", extra=["--alpn-proto=konnectivity"])
        conn, _ = listener.accept()
        with ctx.wrap_socket(conn, server_side=True) as tls:
            self.assertEqual(tls.selected_alpn_protocol(), "konnectivity")
        # Against a gRPC server (which takes h2, offered last) the tunnel works.
        s = self.env.server()
        a = self.env.agent(s, extra=["--alpn-proto=konnectivity,other"])
        h.wait_until(a.ready, what="agent ready over its own TLS")
        backend = h.Backend()
        self.addCleanup(backend.stop)
        t = h.Tunnel(s.channel())
        rsp = t.dial("127.0.0.1:%d" % backend.port)
        self.assertEqual(rsp.error, "")
        self.assertIn(b"hello from backend", h.http_request(t, rsp.connectID, "/"))
        t.cancel()

    def test_server_logs_each_tunnel_at_the_default_level(self):
        s = self.env.server()
        a = self.env.agent(s)
        h.wait_until(a.ready, what="agent ready")
        backend = h.Backend()
        self.addCleanup(backend.stop)
        t = h.Tunnel(s.channel())
        rsp = t.dial("127.0.0.1:%d" % backend.port)
        self.assertIn(b"hello from backend", h.http_request(t, rsp.connectID, "/"))
        t.cancel()
        target = "to 127.0.0.1:%d via agent agent" % backend.port
        h.wait_until(lambda: "tunnel %d %s established" % (rsp.connectID, target) in
                     s.proc.output(), what="the established line")
        h.wait_until(lambda: "tunnel %d %s closed" % (rsp.connectID, target) in s.proc.output(),
                     what="the closed line")


if __name__ == "__main__":
    unittest.main()
