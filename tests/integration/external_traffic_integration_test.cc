// SPDX-License-Identifier: Apache-2.0
// Traffic from off the node, as a cloud load balancer and its clients send it: the test thread's
// namespace is the node (the agent runs there), a client host and a pod host hang off it on
// veths, and the node routes between them:
//
//   client 10.88.1.1 / fd00:88:1::1 ── node 10.88.1.2 | 10.88.2.2 ── pod 10.88.2.1 / fd00:88:2::1
//
// Every test runs on the three data paths; on socket-lb the test process (and so every client
// it starts, off-node ones included) is in the hooked cgroup.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/netns.h"

namespace sluice::testing {
namespace {

// The pod's backend: HTTP on 8080 answering "pod" and a UDP echo on 5353, both dual-stack.
constexpr char kBackend[] = R"(
import socket, socketserver, threading
class Http(socketserver.StreamRequestHandler):
    def handle(self):
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npod\n")
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(b"re:" + data, self.client_address)
def dual(base):
    class Server(base):
        address_family = socket.AF_INET6
        allow_reuse_address = True
        daemon_threads = True
        def server_bind(self):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()
    return Server
threading.Thread(target=dual(socketserver.ThreadingTCPServer)(("::", 8080), Http).serve_forever,
                 daemon=True).start()
dual(socketserver.UDPServer)(("::", 5353), Echo).serve_forever()
)";

// One UDP query: prints the reply, or exits 1 when none comes within a second.
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

constexpr char kLbV4[] = "10.77.0.1";
constexpr char kLbV6[] = "fd00:77::1";

// Whether curl saw its connection reset, at whatever step the RST found it (7: connecting,
// 55: sending the request, 52/56: reading the answer), rather than hang (28). The refusal
// counter tells the proxy's reset from a kernel's.
bool WasReset(const std::string& curl) {
  return curl == "exit 7" || curl == "exit 52" || curl == "exit 55" || curl == "exit 56";
}

std::string Url(const std::string& ip, int port = 80) {
  return ip.find(':') == std::string::npos ? absl::StrCat("http://", ip, ":", port, "/")
                                           : absl::StrCat("http://[", ip, "]:", port, "/");
}

class ExternalTrafficTest : public DatapathTest {
 protected:
  void SetUp() override {
    DatapathTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    auto client = testutil::PeerHost::Create("xc", {"10.88.1.2/24", "fd00:88:1::2/64"},
                                             {"10.88.1.1/24", "fd00:88:1::1/64"},
                                             {"10.88.1.2", "fd00:88:1::2"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    auto pod = testutil::PeerHost::Create("xp", {"10.88.2.2/24", "fd00:88:2::2/64"},
                                          {"10.88.2.1/24", "fd00:88:2::1/64"},
                                          {"10.88.2.2", "fd00:88:2::2"});
    ASSERT_TRUE(pod.ok()) << pod.status();
    pod_ = std::move(*pod);
    // Only socket-lb needs it: its hooks translate the off-node clients too (same cgroup), whose
    // packets to the pod the node then forwards.
    for (const char* key : {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}) {
      ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
    }
    backend_ = std::make_unique<testutil::Subprocess>(pod_->Exec({"python3", "-c", kBackend}));
    ASSERT_TRUE(testutil::WaitFor([&] { return Curl(Url("10.88.2.1", 8080)) == "pod\n"; },
                                  absl::Seconds(10)))
        << backend_->Output();
  }

  void TearDown() override {
    backend_.reset();  // killed by PID before its namespace goes
    pod_.reset();
    client_.reset();
    DatapathTest::TearDown();
  }

  // A LoadBalancer service with externalTrafficPolicy Local: TCP 80 (NodePort 30080) and UDP
  // 53, both families, one endpoint in the pod on this node.
  void WriteService(const std::vector<std::string>& ranges) {
    std::string yaml = ServiceYaml("lb", {"10.96.0.50", "fd00:96::50"},
                                   {{"http", 80, "TCP", 30080}, {"dns", 53, "UDP"}},
                                   "  type: LoadBalancer\n  externalTrafficPolicy: Local\n"
                                   "  healthCheckNodePort: 32100\n"
                                   "  loadBalancerSourceRanges:\n");
    for (const auto& r : ranges) {
      absl::StrAppend(&yaml, "  - \"", r, "\"\n");
    }
    absl::StrAppend(&yaml, "status:\n  loadBalancer:\n    ingress:\n    - ip: ", kLbV4,
                    "\n    - ip: \"", kLbV6, "\"\n");
    Write("lb.yaml", yaml);
  }
  void WriteSlices() {
    const std::vector<PortSpec> ports = {{"http", 8080}, {"dns", 5353, "UDP"}};
    Write("lb-v4.yaml", SliceYaml("lb", {"10.88.2.1"}, ports));
    Write("lb-v6.yaml", SliceYaml("lb", {"fd00:88:2::1"}, ports, "IPv6"));
  }
  // Waits until /debug/services shows `ranges` (as the agent prints them) and the listeners.
  bool WaitRanges(const std::string& ranges) {
    return testutil::WaitFor(
        [&] {
          const std::string json = Get("/debug/services");
          return json.find("\"loadBalancerSourceRanges\": [" + ranges + "]") != std::string::npos &&
                 json.find(absl::StrCat("\"tcp/", kLbV4, ":80\"")) != std::string::npos &&
                 json.find(absl::StrCat("\"tcp/[", kLbV6, "]:80\"")) != std::string::npos &&
                 json.find(absl::StrCat("\"udp/", kLbV4, ":53\"")) != std::string::npos;
        },
        absl::Seconds(10));
  }

  // curl's body, or "exit N" when it failed.
  std::string Curl(const std::string& url, bool from_client = false) {
    return testutil::Curl(url, from_client ? client_.get() : nullptr);
  }
  std::string Udp(const std::string& ip) {
    std::string out;
    const int rc = testutil::RunCommand(client_->Exec({"python3", "-c", kUdpQuery, ip}), &out);
    return rc == 0 ? out : absl::StrCat("exit ", rc);
  }
  double Refused(const std::string& port) {
    return MetricValue("sluice_source_range_refused_total{service=\"test/lb:" + port + "\"}");
  }

  std::unique_ptr<testutil::PeerHost> client_;
  std::unique_ptr<testutil::PeerHost> pod_;
  std::unique_ptr<testutil::Subprocess> backend_;
};

// The ranges guard the LoadBalancer IPs, per family, on every path: a client outside them is
// reset (it does not hang) and its datagrams dropped, while the NodePort, which the ranges do not
// cover, serves it; the node's own clients are admitted only when a range holds the node.
// Widened ranges apply at the next sync.
TEST_P(ExternalTrafficTest, SourceRangesRefuseOutsidersAndServeThemOnceIncluded) {
  StartAgent({"--nodeport-addresses=10.88.1.0/24"});
  WriteSlices();
  WriteService({"10.99.0.0/16", "fd00:99::/64"});
  ASSERT_TRUE(WaitRanges("\"10.99.0.0/16\", \"fd00:99::/64\"")) << Get("/debug/services");

  for (const char* lb : {kLbV4, kLbV6}) {
    const std::string got = Curl(Url(lb), /*from_client=*/true);
    EXPECT_TRUE(WasReset(got)) << lb << ": " << got;
  }
  EXPECT_EQ(Refused("http"), 2);
  EXPECT_EQ(Udp(kLbV4), "exit 1");
  EXPECT_EQ(Refused("dns"), 1);
  EXPECT_EQ(MetricValue("sluice_udp_dropped_total{reason=\"source_range\"}"), 1);
  EXPECT_EQ(Curl(Url("10.88.1.2", 30080), true), "pod\n") << "NodePorts are not guarded";
  EXPECT_EQ(Curl(Url("10.96.0.50")), "pod\n") << "nor are ClusterIPs";
  // From the node: the kernel's source for a local LoadBalancer IP is that IP.
  const std::string local = Curl(Url(kLbV4));
  EXPECT_TRUE(WasReset(local)) << local;
  EXPECT_EQ(Refused("http"), 3);
  if (socket_lb()) {
    // The service's socketLb list: a guarded LoadBalancer IP is left to the proxy, which sees
    // the source; its other frontends are balanced at the socket.
    const std::string json = Get("/debug/services");
    const size_t at =
        json.find("\"socketLb\": [", json.find("\"service\": \"test/lb\", \"port\": \"http\""));
    const std::string frontends = json.substr(at, json.find(']', at) - at);
    EXPECT_THAT(frontends, ::testing::HasSubstr("\"tcp/10.96.0.50:80\""));
    EXPECT_THAT(frontends, ::testing::Not(::testing::HasSubstr(kLbV4)));
  }

  WriteService({"10.88.1.0/24", "fd00:88:1::/64"});
  ASSERT_TRUE(WaitRanges("\"10.88.1.0/24\", \"fd00:88:1::/64\"")) << Get("/debug/services");
  EXPECT_EQ(Curl(Url(kLbV4), true), "pod\n");
  EXPECT_EQ(Curl(Url(kLbV6), true), "pod\n");
  EXPECT_EQ(Udp(kLbV4), "re:q\n");
  EXPECT_EQ(Udp(kLbV6), "re:q\n");
  EXPECT_EQ(Curl(Url(kLbV4)), "pod\n") << "a range holds the node's 10.88.1.2";
  EXPECT_EQ(Refused("http"), 3);

  // What the cloud load balancer probes, from off the node: the ranges do not guard it.
  const std::string probe = Curl(Url("10.88.1.2", 32100), true);
  EXPECT_THAT(probe, ::testing::HasSubstr("\"localEndpoints\": 1")) << "one dual-stack pod";
  Remove("lb-v4.yaml");
  Remove("lb-v6.yaml");
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        return Curl(Url("10.88.1.2", 32100), true).find("\"localEndpoints\": 0") !=
               std::string::npos;
      },
      absl::Seconds(10)));
}

// A Service whose new ranges do not parse is rejected with the field named, and its last good
// version keeps being served, guard included.
TEST_P(ExternalTrafficTest, BadRangesAreRejectedAndTheLastGoodVersionServes) {
  StartAgent();
  WriteSlices();
  WriteService({"10.88.1.0/24"});
  ASSERT_TRUE(WaitRanges("\"10.88.1.0/24\"")) << Get("/debug/services");
  WriteService({"10.88.1.0/33"});
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return agent_->Output().find("spec.loadBalancerSourceRanges[0]: must be a CIDR") !=
               std::string::npos;
      },
      absl::Seconds(10)))
      << agent_->Output();
  EXPECT_EQ(Curl(Url(kLbV4), true), "pod\n");
  const std::string local = Curl(Url(kLbV4));
  EXPECT_EQ(local, "pod\n") << "the node's 10.88.1.2 is in the kept range";
  EXPECT_THAT(Get("/debug/services"), ::testing::HasSubstr("\"10.88.1.0/24\""));
}

INSTANTIATE_TEST_SUITE_P(Paths, ExternalTrafficTest, ::testing::ValuesIn(kDatapaths), DatapathName);

}  // namespace
}  // namespace sluice::testing
