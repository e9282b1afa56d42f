// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/external_nat_topology.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "tests/testutil/cgroup.h"

namespace sluice::testing {
namespace {

// The pod's backend (see ExternalNatTopology). Dual-stack.
constexpr char kBackend[] = R"(
import socket, socketserver, threading
def peer(addr):
    return addr[0][7:] if addr[0].startswith("::ffff:") else addr[0]
class Tcp(socketserver.StreamRequestHandler):
    def who(self):
        return (peer(self.request.getsockname()) + " " + peer(self.client_address) + "\n").encode()
    def handle(self):
        line = self.rfile.readline()
        if line.startswith(b"GET "):
            path = line.split(b" ")[1]
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            body = self.who() if path == b"/who" else (peer(self.client_address) + "\n").encode()
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            return
        while line:
            self.wfile.write(self.who() if line == b"who\n" else line)
            self.wfile.flush()
            line = self.rfile.readline()
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
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
u.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
u.bind(("::", 5353))
while True:
    data, anc, _, addr = u.recvmsg(512, socket.CMSG_SPACE(20))
    to = [d[:16] for level, kind, d in anc if (level, kind) == (socket.IPPROTO_IPV6, socket.IPV6_PKTINFO)]
    local = peer((socket.inet_ntop(socket.AF_INET6, to[0]),))
    reply = local + " " + peer(addr) if data == b"who" else "from " + peer(addr)
    # From the address asked: on the wildcard address the route's preferred one would answer.
    u.sendmsg([reply.encode()], [(socket.IPPROTO_IPV6, socket.IPV6_PKTINFO, to[0] + bytes(4))], 0, addr)
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

}  // namespace

std::string Url(const std::string& ip, int port) {
  return ip.find(':') == std::string::npos ? absl::StrCat("http://", ip, ":", port, "/")
                                           : absl::StrCat("http://[", ip, "]:", port, "/");
}

void ExternalNatTest::SetUp() {
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
  for (const char* key : {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}) {
    ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
  }
}

std::string ExternalNatTest::Curl(const std::string& url, bool from_client) {
  return testutil::Curl(url, from_client ? client_.get() : nullptr);
}

void ExternalNatTopology::SetUp() {
  ExternalNatTest::SetUp();
  if (IsSkipped() || HasFatalFailure()) {
    return;
  }
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
  backend_ = std::make_unique<testutil::Subprocess>(pod_->Exec({"python3", "-c", kBackend}));
  ASSERT_TRUE(testutil::WaitFor([&] { return Curl(Url("10.88.2.1", 8080)) == "10.88.2.2\n"; },
                                absl::Seconds(10)))
      << backend_->Output();
}

void ExternalNatTopology::TearDown() {
  backend_.reset();  // killed by PID before its namespace goes
  pod_.reset();
  client_.reset();
  AgentTest::TearDown();  // stops the agent, then unmounts the bpffs (the pins go)
}

std::vector<std::string> ExternalNatTopology::Flags(const std::string& mode) {
  return {"--external-datapath=" + mode, "--bpf-root=" + bpffs_->path(), "--external-devices=nc0"};
}

void ExternalNatTopology::WriteService(const std::string& policy) {
  std::string yaml = ServiceYaml(
      "lb", {"10.96.0.50", "fd00:96::50"}, {{"http", 80, "TCP", 30080}, {"dns", 53, "UDP"}},
      absl::StrCat("  type: LoadBalancer\n  externalTrafficPolicy: ", policy, "\n"));
  if (policy == "Local") {
    yaml += "  healthCheckNodePort: 32100\n";
  }
  absl::StrAppend(&yaml, "status:\n  loadBalancer:\n    ingress:\n    - ip: ", kLbV4,
                  "\n    - ip: \"", kLbV6, "\"\n");
  Write("lb.yaml", yaml);
  WriteSlices({"10.88.2.1"}, {"fd00:88:2::1"});
}

void ExternalNatTopology::WriteSlices(const std::vector<std::string>& v4,
                                      const std::vector<std::string>& v6) {
  const std::vector<PortSpec> ports = {{"http", 8080}, {"dns", 5353, "UDP"}};
  Write("lb-v4.yaml", SliceYaml("lb", v4, ports));
  Write("lb-v6.yaml", SliceYaml("lb", v6, ports, "IPv6"));
}

std::string ExternalNatTopology::ExternalBpf(const std::string& port) {
  const std::string json = Get("/debug/services");
  const size_t object = json.find("\"service\": \"test/lb\", \"port\": \"" + port + "\"");
  const size_t at = object == std::string::npos ? object : json.find("\"externalBpf\": [", object);
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

bool ExternalNatTopology::WaitExternal(const std::string& frontend, const std::string& port) {
  return testutil::WaitFor(
      [&] { return ExternalBpf(port).find("\"" + frontend + "\"") != std::string::npos; },
      absl::Seconds(10));
}

bool ExternalNatTopology::WaitProxy() {
  return testutil::WaitFor(
      [&] {
        return Get("/debug/services").find(absl::StrCat("\"tcp/", kLbV4, ":80\"")) !=
               std::string::npos;
      },
      absl::Seconds(10));
}

std::string ExternalNatTopology::Udp(const std::string& ip) {
  std::string out;
  const int rc = testutil::RunCommand(client_->Exec({"python3", "-c", kUdpQuery, ip}), &out);
  return rc == 0 ? out : absl::StrCat("exit ", rc);
}

}  // namespace sluice::testing
