// SPDX-License-Identifier: Apache-2.0
// SNAT of the eBPF NAT (eTP Cluster to a backend on another node) end to end, with the real
// sluice-agent on node A (the test thread's namespace) and four more namespaces:
//
//   client 10.87.1.1 ── nc0 10.87.1.2  node A  nb0 10.87.2.2 ── node B 10.87.2.1 ── pod b 10.87.3.1
//                                      na0 10.87.4.2 ── pod a 10.87.4.1
//
// (and fd00:87:N:: the same). The service's endpoints are pod a (node1, this node) and pod b
// (node2): a flow to pod b leaves node A from 10.87.2.2 with a port of the SNAT range, a flow
// to pod a keeps the client's address; the client's replies come from the service address.
// Each pod answers with its name and the address (and port) it sees.
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "tests/integration/external_nat_topology.h"
#include "tests/testutil/netns.h"

namespace sluice::testing {
namespace {

using ::testing::HasSubstr;

// argv[1] names the pod. TCP 8080: an HTTP answer "<name> <peer>", or, for a connection that
// starts with another line, "<name> <peer> <peer port>" per line; UDP 5353: "<name> <peer>".
constexpr char kBackend[] = R"(
import socket, socketserver, sys, threading
name = sys.argv[1]
def peer(addr):
    return addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]
class Tcp(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline()
        if line.startswith(b"GET "):
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            body = f"{name} {peer(self.client_address)}\n".encode()
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        while line:
            self.wfile.write(f"{name} {peer(self.client_address)} {self.client_address[1]}\n".encode())
            self.wfile.flush()
            line = self.rfile.readline()
class Udp(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        sock.sendto(f"{name} {peer(self.client_address)}".encode(), self.client_address)
def dual(base):
    class Server(base):
        address_family = socket.AF_INET6
        allow_reuse_address = True
        daemon_threads = True
        request_queue_size = 128
        def server_bind(self):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()
    return Server
threading.Thread(target=dual(socketserver.ThreadingTCPServer)(("::", 8080), Tcp).serve_forever,
                 daemon=True).start()
dual(socketserver.UDPServer)(("::", 5353), Udp).serve_forever()
)";

// One UDP query to port 53 on a connected socket (so only an answer from the service address
// is taken): prints it, or exits 1 when none comes within a second.
constexpr char kUdpQuery[] = R"(
import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.connect((sys.argv[1], 53))
s.send(b"q")
try:
    print(s.recv(100).decode())
except socket.timeout:
    sys.exit(1)
)";

// argv[2] TCP connections to argv[1]:80 open at once; each asks once; the answers, a line each.
constexpr char kManyClients[] = R"(
import socket, sys
conns = [socket.create_connection((sys.argv[1], 80), timeout=5) for _ in range(int(sys.argv[2]))]
for c in conns:
    c.sendall(b"who\n")
for c in conns:
    print(c.makefile("rb").readline().decode().strip())
)";

// Sends argv[2] bytes and a newline to argv[1]:80 as one line and prints the answer's first word
// (the pod's name); exits non-zero when the answer does not come within 10 s.
constexpr char kUpload[] = R"(
import socket, sys
s = socket.create_connection((sys.argv[1], 80), timeout=10)
s.sendall(b"x" * int(sys.argv[2]) + b"\n")
print(s.makefile("rb").readline().decode().split()[0])
)";

// A namespace behind node B for its pod, made with `ip -n` from here (PeerHost joins a host to
// the calling thread's namespace only). The destructor deletes it: end its processes first.
class PodBehind final {
 public:
  PodBehind(std::string node, std::string name) : node_(std::move(node)), name_(std::move(name)) {}
  ~PodBehind() { testutil::RunCommand({"ip", "netns", "del", name_}); }
  PodBehind(const PodBehind&) = delete;
  PodBehind& operator=(const PodBehind&) = delete;

  // pb0 on the node with `node_addresses`, pb1 here with `addresses` and default routes via
  // the node's. Returns the failing command's output, or "".
  std::string Create(const std::vector<std::string>& node_addresses,
                     const std::vector<std::string>& addresses) {
    std::vector<std::vector<std::string>> steps = {{"ip", "netns", "add", name_},
                                                   {"ip", "-n", node_, "link", "add", "pb0", "type",
                                                    "veth", "peer", "name", "pb1", "netns", name_},
                                                   {"ip", "-n", node_, "link", "set", "pb0", "up"},
                                                   {"ip", "-n", name_, "link", "set", "lo", "up"},
                                                   {"ip", "-n", name_, "link", "set", "pb1", "up"}};
    for (const auto& a : node_addresses) {
      steps.push_back({"ip", "-n", node_, "addr", "add", a, "dev", "pb0", "nodad"});
    }
    for (const auto& a : addresses) {
      steps.push_back({"ip", "-n", name_, "addr", "add", a, "dev", "pb1", "nodad"});
    }
    for (const auto& a : node_addresses) {
      const std::string gw = a.substr(0, a.find('/'));
      steps.push_back({"ip", "-n", name_, gw.find(':') == std::string::npos ? "-4" : "-6", "route",
                       "add", "default", "via", gw});
    }
    for (const auto& argv : steps) {
      std::string out;
      if (testutil::RunCommand(argv, &out) != 0) {
        return absl::StrCat(absl::StrJoin(argv, " "), ": ", out);
      }
    }
    return "";
  }
  std::vector<std::string> Exec(std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
    return argv;
  }

 private:
  const std::string node_, name_;
};

class ExternalNatSnatTest : public ExternalNatTest {
 protected:
  void SetUp() override {
    ExternalNatTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    auto client = testutil::PeerHost::Create("nc", {"10.87.1.2/24", "fd00:87:1::2/64"},
                                             {"10.87.1.1/24", "fd00:87:1::1/64"},
                                             {"10.87.1.2", "fd00:87:1::2"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    auto node_b = testutil::PeerHost::Create("nb", {"10.87.2.2/24", "fd00:87:2::2/64"},
                                             {"10.87.2.1/24", "fd00:87:2::1/64"},
                                             {"10.87.2.2", "fd00:87:2::2"});
    ASSERT_TRUE(node_b.ok()) << node_b.status();
    node_b_ = std::move(*node_b);
    auto pod_a = testutil::PeerHost::Create("na", {"10.87.4.2/24", "fd00:87:4::2/64"},
                                            {"10.87.4.1/24", "fd00:87:4::1/64"},
                                            {"10.87.4.2", "fd00:87:4::2"});
    ASSERT_TRUE(pod_a.ok()) << pod_a.status();
    pod_a_ = std::move(*pod_a);
    pod_b_ = std::make_unique<PodBehind>(node_b_->name(), node_b_->name() + "-pod");
    const std::string err =
        pod_b_->Create({"10.87.3.2/24", "fd00:87:3::2/64"}, {"10.87.3.1/24", "fd00:87:3::1/64"});
    ASSERT_EQ(err, "");
    for (const char* key : {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}) {
      ASSERT_EQ(testutil::RunCommand(node_b_->Exec({"sysctl", "-qw", key})), 0) << key;
    }
    // Node A reaches node B's pods through node B, as a cluster's pod routes do.
    ASSERT_EQ(testutil::RunCommand({"ip", "route", "add", "10.87.3.0/24", "via", "10.87.2.1"}), 0);
    ASSERT_EQ(
        testutil::RunCommand({"ip", "-6", "route", "add", "fd00:87:3::/64", "via", "fd00:87:2::1"}),
        0);
    backend_a_ =
        std::make_unique<testutil::Subprocess>(pod_a_->Exec({"python3", "-c", kBackend, "a"}));
    backend_b_ =
        std::make_unique<testutil::Subprocess>(pod_b_->Exec({"python3", "-c", kBackend, "b"}));
    // Both pods answer node A (b through node B, on either family).
    ASSERT_TRUE(testutil::WaitFor(
        [&] {
          return Curl(Url("10.87.4.1", 8080)) == "a 10.87.4.2\n" &&
                 Curl(Url("10.87.3.1", 8080)) == "b 10.87.2.2\n" &&
                 Curl(Url("fd00:87:3::1", 8080)) == "b fd00:87:2::2\n";
        },
        absl::Seconds(10)))
        << backend_a_->Output() << backend_b_->Output();
  }

  void TearDown() override {
    backend_a_.reset();  // killed by PID before their namespaces go
    backend_b_.reset();
    pod_b_.reset();  // before node B, its other end
    pod_a_.reset();
    node_b_.reset();
    client_.reset();
    AgentTest::TearDown();
  }

  void StartNatAgent() {
    StartAgent(
        {"--external-datapath=bpf", "--bpf-root=" + bpffs_->path(), "--external-devices=nc0,nb0"});
  }

  // A LoadBalancer service, eTP Cluster: TCP 80 (NodePort 30080) and UDP 53, both families;
  // endpoints pod b (node2) and, `with_local`, pod a (this node).
  void WriteService(bool with_local = true) {
    std::string yaml = ServiceYaml("lb", {"10.96.0.50", "fd00:96::50"},
                                   {{"http", 80, "TCP", 30080}, {"dns", 53, "UDP"}},
                                   "  type: LoadBalancer\n  externalTrafficPolicy: Cluster\n");
    absl::StrAppend(&yaml, "status:\n  loadBalancer:\n    ingress:\n    - ip: ", kLbV4,
                    "\n    - ip: \"", kLbV6, "\"\n");
    Write("lb.yaml", yaml);
    const std::vector<PortSpec> ports = {{"http", 8080}, {"dns", 5353, "UDP"}};
    for (const auto& [family, a, b] : {std::tuple{"IPv4", "10.87.4.1", "10.87.3.1"},
                                       std::tuple{"IPv6", "fd00:87:4::1", "fd00:87:3::1"}}) {
      std::vector<std::string> addresses = {b};
      if (with_local) {
        addresses.push_back(a);
      }
      std::string slice = SliceYaml("lb", addresses, ports, family);
      // The first endpoint (pod b) is on node2.
      slice.replace(slice.find("nodeName: node1"), 15, "nodeName: node2");
      Write(absl::StrCat("lb-", family, ".yaml"), slice);
    }
  }
  // Waits until the NAT serves the LoadBalancer IPs with `backends` endpoints each.
  bool WaitServed(size_t backends) {
    return testutil::WaitFor(
        [&] {
          const std::string json = Get("/debug/services");
          return json.find(absl::StrCat("\"tcp/", kLbV4, ":80\"")) != std::string::npos &&
                 json.find("externalBpf") != std::string::npos &&
                 json.find("10.87.3.1") != std::string::npos &&
                 (backends == 1 || json.find("10.87.4.1") != std::string::npos) &&
                 ExternalBpfHas(absl::StrCat("tcp/", kLbV4, ":80")) &&
                 ExternalBpfHas(absl::StrCat("udp/[", kLbV6, "]:53"));
        },
        absl::Seconds(10));
  }
  bool ExternalBpfHas(const std::string& frontend) {
    const std::string json = Get("/debug/services");
    const size_t at = json.find("\"externalBpf\": [");
    return at != std::string::npos && json.find("\"" + frontend + "\"", at) != std::string::npos;
  }

  std::string Udp(const std::string& ip) {
    std::string out;
    const int rc = testutil::RunCommand(client_->Exec({"python3", "-c", kUdpQuery, ip}), &out);
    return rc == 0 ? out : absl::StrCat("exit ", rc);
  }

  std::unique_ptr<testutil::PeerHost> node_b_, pod_a_;
  std::unique_ptr<PodBehind> pod_b_;
  std::unique_ptr<testutil::Subprocess> backend_a_, backend_b_;
};

// TCP (LoadBalancer IPs and NodePorts) and UDP, both families: pod b, on node B, sees node A's
// address on the link to node B; pod a, on this node, the client's. Round-robin alternates, so
// a few new connections reach both.
TEST_F(ExternalNatSnatTest, ARemotePodSeesTheNodeALocalOneTheClient) {
  StartNatAgent();
  EXPECT_THAT(Get("/proxyMode"), HasSubstr("+external-bpf")) << agent_->Output();
  WriteService();
  ASSERT_TRUE(WaitServed(2)) << Get("/debug/services");
  struct Case {
    std::string url_or_ip;
    bool udp;
    std::string client, node_a;
  };
  const std::vector<Case> cases = {
      {Url(kLbV4), false, "10.87.1.1", "10.87.2.2"},
      {Url("10.87.1.2", 30080), false, "10.87.1.1", "10.87.2.2"},
      {Url(kLbV6), false, "fd00:87:1::1", "fd00:87:2::2"},
      {Url("fd00:87:1::2", 30080), false, "fd00:87:1::1", "fd00:87:2::2"},
      {kLbV4, true, "10.87.1.1", "10.87.2.2"},
      {kLbV6, true, "fd00:87:1::1", "fd00:87:2::2"},
  };
  for (const Case& c : cases) {
    std::set<std::string> seen;
    for (int i = 0; i < 4; ++i) {
      std::string got = c.udp ? Udp(c.url_or_ip) : Curl(c.url_or_ip, /*from_client=*/true);
      if (!got.empty() && got.back() == '\n') {
        got.pop_back();
      }
      seen.insert(got);
    }
    EXPECT_THAT(seen, ::testing::UnorderedElementsAre("a " + c.client, "b " + c.node_a))
        << c.url_or_ip << (c.udp ? " (UDP)" : "");
  }
  EXPECT_GT(MetricValue("sluice_external_nat_flows_total{service_port=\"test/lb:http\"}"), 0);
  EXPECT_EQ(MetricValue("sluice_external_nat_drops_total{reason=\"snat_ports\"}"), 0);
  EXPECT_EQ(MetricValue("sluice_external_nat_drops_total{reason=\"no_route\"}"), 0);
}

// Many connections open at once to the remote pod: each leaves node A from its own port of the
// SNAT range, and each gets its own answers.
TEST_F(ExternalNatSnatTest, ConcurrentConnectionsGetDistinctSnatPorts) {
  StartNatAgent();
  WriteService(/*with_local=*/false);
  ASSERT_TRUE(WaitServed(1)) << Get("/debug/services");
  constexpr int kConnections = 50;
  std::string out;
  ASSERT_EQ(testutil::RunCommand(
                client_->Exec({"python3", "-c", kManyClients, kLbV4, std::to_string(kConnections)}),
                &out),
            0)
      << out;
  std::set<int> ports;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, ' ');
    ASSERT_EQ(parts.size(), 3u) << line;
    EXPECT_EQ(parts[0], "b");
    EXPECT_EQ(parts[1], "10.87.2.2");
    int port = 0;
    ASSERT_TRUE(absl::SimpleAtoi(parts[2], &port)) << line;
    EXPECT_GE(port, static_cast<int>(extnat::kSnatPortMin));
    EXPECT_LE(port, static_cast<int>(extnat::kSnatPortMax));
    ports.insert(port);
  }
  EXPECT_EQ(ports.size(), static_cast<size_t>(kConnections)) << out;
}

// Path MTU discovery across the nodes: the link between node A and node B has the smaller MTU
// (1400; the client's and the pods' links 1500), so node A's program, which forwards SNATed
// packets itself, answers the client's full-size segments with "fragmentation needed" / "packet
// too big" from the service address: the client's route cache learns the MTU, and a 4 MB upload
// to the remote pod arrives whole.
TEST_F(ExternalNatSnatTest, UploadsThroughASmallerMtuBetweenTheNodesArrive) {
  ASSERT_EQ(testutil::RunCommand({"ip", "link", "set", "nb0", "mtu", "1400"}), 0);
  ASSERT_EQ(testutil::RunCommand(node_b_->Exec({"ip", "link", "set", "nb1", "mtu", "1400"})), 0);
  StartNatAgent();
  WriteService(/*with_local=*/false);
  ASSERT_TRUE(WaitServed(1)) << Get("/debug/services");
  for (const char* ip : {kLbV4, kLbV6}) {
    std::string out;
    EXPECT_EQ(testutil::RunCommand(client_->Exec({"python3", "-c", kUpload, ip, "4194304"}), &out),
              0)
        << ip << ": " << out;
    EXPECT_EQ(out, "b\n") << ip;
    testutil::RunCommand(client_->Exec({"ip", "route", "get", ip}), &out);
    EXPECT_THAT(out, HasSubstr("mtu 1400")) << ip;
  }
  EXPECT_GT(MetricValue("sluice_external_nat_drops_total{reason=\"mtu_icmp\"}"), 0);
  EXPECT_EQ(MetricValue("sluice_external_nat_drops_total{reason=\"mtu\"}"), 0);
}

}  // namespace
}  // namespace sluice::testing
