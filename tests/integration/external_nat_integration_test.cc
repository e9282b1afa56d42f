// SPDX-License-Identifier: Apache-2.0
// The eBPF NAT of remote clients (--external-datapath) end to end: the test thread's namespace
// is the node (the agent runs there), a client host and a pod host hang off it on veths, and
// the node routes between them:
//
//   client 10.88.1.1 / fd00:88:1::1 ── node 10.88.1.2 | 10.88.2.2 ── pod 10.88.2.1 / fd00:88:2::1
//
// The pod answers with the address it sees: the client's own when the kernel translates, the
// node's (10.88.2.2) when the proxy carries the connection.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "tests/integration/agent_fixture.h"
#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"

namespace sluice::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The pod: on 8080 an HTTP answer naming the peer's address, or, for a connection that starts
// with anything else, a line echo; on 5353 a UDP echo naming the peer. Dual-stack.
constexpr char kBackend[] = R"(
import socket, socketserver, threading
def peer(addr):
    return addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]
class Tcp(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        if line.startswith(b"GET "):
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            body = (peer(self.client_address) + "\n").encode()
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        while line:
            self.wfile.write(line)
            self.wfile.flush()
            line = self.rfile.readline()
class Udp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(b"from " + peer(self.client_address).encode(), self.client_address)
def dual(base):
    class Server(base):
        address_family = socket.AF_INET6
        allow_reuse_address = True
        daemon_threads = True
        def server_bind(self):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()
    return Server
threading.Thread(target=dual(socketserver.ThreadingTCPServer)(("::", 8080), Tcp).serve_forever,
                 daemon=True).start()
dual(socketserver.UDPServer)(("::", 5353), Udp).serve_forever()
)";

// One UDP query to port 53: prints the reply, or exits 1 when none comes within a second.
constexpr char kUdpQuery[] = R"(
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.sendto(b"q", (sys.argv[1], 53))
try:
    print(s.recv(100).decode())
except socket.timeout:
    sys.exit(1)
)";

// One long TCP connection: a numbered line every 50 ms, each echo checked; prints "ok N" after
// the Nth, and ends after the first exchange once the file argv[3] exists. Any error: "fail".
constexpr char kLongClient[] = R"(
import os, socket, sys, time
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    f = s.makefile("rwb")
    n = 0
    while True:
        done = os.path.exists(sys.argv[3])
        f.write(b"line %d\n" % n)
        f.flush()
        if f.readline() != b"line %d\n" % n:
            raise RuntimeError("bad echo")
        n += 1
        print("ok", n, flush=True)
        if done:
            break
        time.sleep(0.05)
except Exception as e:
    print("fail", e, flush=True)
    sys.exit(1)
)";

constexpr char kLbV4[] = "10.77.0.1";
constexpr char kLbV6[] = "fd00:77::1";

std::string Url(const std::string& ip, int port = 80) {
  return ip.find(':') == std::string::npos ? absl::StrCat("http://", ip, ":", port, "/")
                                           : absl::StrCat("http://[", ip, "]:", port, "/");
}

// The last "ok N" of kLongClient's output, or 0.
int Exchanges(const std::string& output) {
  int last = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    int n = 0;
    if (absl::ConsumePrefix(&line, "ok ") && absl::SimpleAtoi(line, &n)) {
      last = n;
    }
  }
  return last;
}

class ExternalNatTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    // The agent's own check, in this namespace: skip only where the machine cannot (CI runs
    // where it can); any other failure is a failure.
    absl::Status self_test = extnat::SelfTest();
    if (absl::IsPermissionDenied(self_test) || absl::IsUnimplemented(self_test)) {
      GTEST_SKIP() << "the eBPF NAT is unavailable here: " << self_test;
    }
    ASSERT_TRUE(self_test.ok()) << self_test;
    auto bpffs = testutil::TestBpfFs::Create();
    ASSERT_TRUE(bpffs.ok()) << bpffs.status();
    bpffs_ = std::move(*bpffs);
    auto client = testutil::PeerHost::Create("nc", {"10.88.1.2/24", "fd00:88:1::2/64"},
                                             {"10.88.1.1/24", "fd00:88:1::1/64"},
                                             {"10.88.1.2", "fd00:88:1::2"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    auto pod = testutil::PeerHost::Create("np", {"10.88.2.2/24", "fd00:88:2::2/64"},
                                          {"10.88.2.1/24", "fd00:88:2::1/64"},
                                          {"10.88.2.2", "fd00:88:2::2"});
    ASSERT_TRUE(pod.ok()) << pod.status();
    pod_ = std::move(*pod);
    for (const char* key : {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}) {
      ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
    }
    backend_ = std::make_unique<testutil::Subprocess>(pod_->Exec({"python3", "-c", kBackend}));
    ASSERT_TRUE(testutil::WaitFor([&] { return Curl(Url("10.88.2.1", 8080)) == "10.88.2.2\n"; },
                                  absl::Seconds(10)))
        << backend_->Output();
  }

  void TearDown() override {
    long_client_.reset();
    backend_.reset();  // killed by PID before its namespace goes
    pod_.reset();
    client_.reset();
    AgentTest::TearDown();  // stops the agent, then unmounts the bpffs (the pins go)
  }

  // The client-facing device is named: a veth, which the default selection leaves out.
  std::vector<std::string> Flags(const std::string& mode) {
    return {"--external-datapath=" + mode, "--bpf-root=" + bpffs_->path(),
            "--external-devices=nc0"};
  }

  // A LoadBalancer service: TCP 80 (NodePort 30080) and UDP 53, both families, its one
  // endpoint in the pod on this node.
  void WriteService(const std::string& policy) {
    std::string yaml = ServiceYaml(
        "lb", {"10.96.0.50", "fd00:96::50"}, {{"http", 80, "TCP", 30080}, {"dns", 53, "UDP"}},
        absl::StrCat("  type: LoadBalancer\n  externalTrafficPolicy: ", policy, "\n"));
    if (policy == "Local") {
      yaml += "  healthCheckNodePort: 32100\n";
    }
    absl::StrAppend(&yaml, "status:\n  loadBalancer:\n    ingress:\n    - ip: ", kLbV4,
                    "\n    - ip: \"", kLbV6, "\"\n");
    Write("lb.yaml", yaml);
    const std::vector<PortSpec> ports = {{"http", 8080}, {"dns", 5353, "UDP"}};
    Write("lb-v4.yaml", SliceYaml("lb", {"10.88.2.1"}, ports));
    Write("lb-v6.yaml", SliceYaml("lb", {"fd00:88:2::1"}, ports, "IPv6"));
  }
  // The `externalBpf` list of test/lb's `port` in /debug/services ("" when absent).
  std::string ExternalBpf(const std::string& port) {
    const std::string json = Get("/debug/services");
    const size_t object = json.find("\"service\": \"test/lb\", \"port\": \"" + port + "\"");
    const size_t at =
        object == std::string::npos ? object : json.find("\"externalBpf\": [", object);
    if (at == std::string::npos) {
      return "";
    }
    // The list ends at the first ']' that is not an IPv6 address's (those are followed by ':').
    size_t end = json.find(']', at);
    while (end != std::string::npos && end + 1 < json.size() && json[end + 1] == ':') {
      end = json.find(']', end + 1);
    }
    return json.substr(at, end - at);
  }
  // Waits until /debug/services lists `frontend` ("tcp/10.77.0.1:80") as served by the NAT.
  bool WaitExternal(const std::string& frontend, const std::string& port = "http") {
    return testutil::WaitFor(
        [&] { return ExternalBpf(port).find("\"" + frontend + "\"") != std::string::npos; },
        absl::Seconds(10));
  }
  // Waits until the proxy listens on the LoadBalancer IP (its path when the NAT is off).
  bool WaitProxy() {
    return testutil::WaitFor(
        [&] {
          return Get("/debug/services").find(absl::StrCat("\"tcp/", kLbV4, ":80\"")) !=
                 std::string::npos;
        },
        absl::Seconds(10));
  }

  // curl's body from the client host, or "exit N" when it failed.
  std::string Curl(const std::string& url, bool from_client = false) {
    std::vector<std::string> argv = {"curl", "-sS", "--max-time", "5", url};
    if (from_client) {
      argv = client_->Exec(argv);
    }
    std::string out;
    const int rc = testutil::RunCommand(argv, &out);
    return rc == 0 ? out : absl::StrCat("exit ", rc);
  }
  std::string Udp(const std::string& ip) {
    std::string out;
    const int rc = testutil::RunCommand(client_->Exec({"python3", "-c", kUdpQuery, ip}), &out);
    return rc == 0 ? out : absl::StrCat("exit ", rc);
  }
  // Every frontend of the service from the client: each answer must name `v4` (IPv4 clients)
  // or `v6`, or, when the proxy carries them, either of the node's addresses (it may dial the
  // pod's address of the other family).
  void ExpectServedSeeing(const std::string& v4, const std::string& v6) {
    auto seen = [&](const std::string& want, const std::string& got) {
      return got == want + "\n" ||
             (want == "node" && (got == "10.88.2.2\n" || got == "fd00:88:2::2\n"));
    };
    for (const std::string& url : {Url(kLbV4), Url("10.88.1.2", 30080)}) {
      const std::string got = Curl(url, /*from_client=*/true);
      EXPECT_TRUE(seen(v4, got)) << url << ": " << got;
    }
    for (const std::string& url : {Url(kLbV6), Url("fd00:88:1::2", 30080)}) {
      const std::string got = Curl(url, /*from_client=*/true);
      EXPECT_TRUE(seen(v6, got)) << url << ": " << got;
    }
    for (const auto& [lb, want] : {std::pair{kLbV4, v4}, std::pair{kLbV6, v6}}) {
      const std::string got = Udp(lb);
      EXPECT_TRUE(got.starts_with("from ") && seen(want, got.substr(5))) << lb << ": " << got;
    }
  }

  std::unique_ptr<testutil::PeerHost> client_;
  std::unique_ptr<testutil::PeerHost> pod_;
  std::unique_ptr<testutil::Subprocess> backend_;
  std::unique_ptr<testutil::Subprocess> long_client_;
};

// eTP Local, and Cluster with its only endpoint here: the kernel translates every frontend
// (LoadBalancer IPs and NodePorts, both families, TCP and UDP) and the pod sees the client.
TEST_F(ExternalNatTest, ThePodSeesTheClientsAddress) {
  StartAgent(Flags("bpf"));
  EXPECT_THAT(Get("/proxyMode"), HasSubstr("+external-bpf")) << agent_->Output();
  for (const char* policy : {"Local", "Cluster"}) {
    SCOPED_TRACE(policy);
    WriteService(policy);
    ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
    ASSERT_TRUE(WaitExternal("tcp/10.88.1.2:30080")) << Get("/debug/services");
    ExpectServedSeeing("10.88.1.1", "fd00:88:1::1");
  }
  EXPECT_GT(MetricValue("sluice_external_nat_flows_total{service_port=\"test/lb:http\"}"), 0);
  EXPECT_GT(MetricValue("sluice_external_nat_packets_total{service_port=\"test/lb:http\"}"), 0);
  EXPECT_EQ(MetricValue("sluice_external_nat_unavailable{reason=\"disabled\"}"), -1);
}

// By default veths (and bridges) are not external devices, and this node's links are all
// veths: the NAT is on but attached nowhere, said in the log, and the proxy serves.
TEST_F(ExternalNatTest, TheDefaultDevicesLeaveOutVeths) {
  StartAgent({"--external-datapath=bpf", "--bpf-root=" + bpffs_->path()});
  EXPECT_THAT(Get("/proxyMode"), HasSubstr("+external-bpf")) << agent_->Output();
  WriteService("Local");
  ASSERT_TRUE(WaitProxy()) << Get("/debug/services");
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("no external devices") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  ExpectServedSeeing("node", "node");
  for (const char* dev : {"nc0", "np0"}) {
    std::string filters;
    testutil::RunCommand({"tc", "filter", "show", "dev", dev, "ingress"}, &filters);
    EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << dev << ": " << filters;
  }
}

// With an endpoint on another node the port stays in the kernel (flows to that endpoint are
// SNATed: external_nat_snat_integration_test.cc).
TEST_F(ExternalNatTest, ARemoteEndpointKeepsThePortInTheKernel) {
  StartAgent(Flags("bpf"));
  WriteService("Cluster");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  std::string remote = SliceYaml("lb", {"10.88.2.1", "10.88.3.9"}, {{"http", 8080}});
  remote.replace(remote.rfind("nodeName: node1"), 15, "nodeName: node2");
  Write("lb-v4.yaml", remote);
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Get("/debug/services").find("10.88.3.9") != std::string::npos &&
               ExternalBpf("http").find(kLbV4) != std::string::npos;
      },
      absl::Seconds(10)))
      << Get("/debug/services");
  EXPECT_THAT(ExternalBpf("http"), HasSubstr(absl::StrCat("\"tcp/[", kLbV6, "]:80\"")));
  EXPECT_EQ(Curl(Url(kLbV6), true), "fd00:88:1::1\n");
}

// A node address added at run time: the link watcher has the NodePort served on it in the
// kernel well before the next periodic sync (an hour away here).
TEST_F(ExternalNatTest, ANewNodeAddressIsFollowed) {
  std::vector<std::string> flags = Flags("bpf");
  flags.push_back("--sync-period=1h");
  StartAgent(flags);
  WriteService("Local");
  ASSERT_TRUE(WaitExternal("tcp/10.88.1.2:30080")) << Get("/debug/services");
  EXPECT_THAT(ExternalBpf("http"), Not(HasSubstr("10.88.1.3")));
  ASSERT_EQ(testutil::RunCommand({"ip", "addr", "add", "10.88.1.3/24", "dev", "nc0"}), 0);
  ASSERT_TRUE(WaitExternal("tcp/10.88.1.3:30080")) << Get("/debug/services");
  EXPECT_EQ(Curl(Url("10.88.1.3", 30080), true), "10.88.1.1\n");
}

// --external-datapath=proxy: the same frontends are served by the proxy (the pod sees the
// node), and what an earlier agent left in the kernel is removed.
TEST_F(ExternalNatTest, ProxyModeServesThroughTheProxyAndRemovesTheKernelState) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  ExpectServedSeeing("10.88.1.1", "fd00:88:1::1");
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();

  StartAgent(Flags("proxy"));
  EXPECT_THAT(Get("/proxyMode"), Not(HasSubstr("external"))) << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_external_nat_unavailable{reason=\"disabled\"}"), 1);
  ASSERT_TRUE(WaitProxy()) << Get("/debug/services");
  ExpectServedSeeing("node", "node");
  std::string filters;
  testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", "ingress"}, &filters);
  EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << filters;
}

// --cleanup with the node's bpf root removes the filters from every device and the pins.
TEST_F(ExternalNatTest, CleanupRemovesTheFiltersAndThePins) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  std::string filters;
  testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", "ingress"}, &filters);
  ASSERT_THAT(filters, HasSubstr("sluice")) << "the filters outlive the agent";
  // (The bpffs's own progs.debug and maps.debug are not pins.)
  std::string pins;
  testutil::RunCommand({"find", bpffs_->path(), "-name", "sluice_*"}, &pins);
  ASSERT_NE(pins, "") << "the maps are pinned";
  std::string out;
  ASSERT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--cleanup", "--bpf-root=" + bpffs_->path(),
                                  "--state-dir=" + dir_ + "/.state"},
                                 &out),
            0)
      << out;
  for (const char* dev : {"nc0", "np0"}) {
    for (const char* dir : {"ingress", "egress"}) {
      testutil::RunCommand({"tc", "filter", "show", "dev", dev, dir}, &filters);
      EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << dev << " " << dir;
    }
  }
  testutil::RunCommand({"find", bpffs_->path(), "-name", "sluice_*"}, &pins);
  EXPECT_EQ(pins, "") << pins;
  // Nothing translates: the LoadBalancer IP is no one's (no agent, no VIP).
  EXPECT_NE(Curl(Url(kLbV4), true), "10.88.1.1\n");
}

// kill -9 with a connection open in the kernel: it goes on while no agent runs and after the
// next one adopted the pinned maps.
TEST_F(ExternalNatTest, AFlowOutlivesTheAgentAndTheNextOneAdoptsIt) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  const std::string stop = dir_ + "/stop";
  long_client_ = std::make_unique<testutil::Subprocess>(
      client_->Exec({"python3", "-c", kLongClient, kLbV4, "80", stop}));
  ASSERT_TRUE(
      testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= 5; }, absl::Seconds(10)))
      << long_client_->Output();

  agent_->Signal(SIGKILL);
  agent_->Wait(absl::Seconds(10));
  // No agent: the kernel alone carries it.
  int before = Exchanges(long_client_->Output());
  ASSERT_TRUE(testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= before + 5; },
                                absl::Seconds(10)))
      << long_client_->Output();

  StartAgent(Flags("bpf"));
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("adopted the pinned maps") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  before = Exchanges(long_client_->Output());
  ASSERT_TRUE(testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= before + 5; },
                                absl::Seconds(10)))
      << long_client_->Output();
  EXPECT_EQ(Curl(Url(kLbV4), true), "10.88.1.1\n") << "new flows are translated too";
  testutil::RunCommand({"touch", stop});
  EXPECT_EQ(long_client_->Wait(absl::Seconds(10)), 0) << long_client_->Output();
  EXPECT_THAT(long_client_->Output(), Not(HasSubstr("fail")));
}

}  // namespace
}  // namespace sluice::testing
