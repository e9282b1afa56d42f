// SPDX-License-Identifier: Apache-2.0
// Socket-level balancing end to end: the real sluice-agent attaches its cgroup programs to a
// test cgroup this process is moved into (never the machine's root), pins to a private bpffs,
// and the test's own sockets are the local clients. The data-path conformance suites run on this
// path too (kDatapaths); these are the behaviours only it has.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "lib/net/socket.h"

#include "agent/dataplane/socklb/cgroup.h"
#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::ConnectTcp;
using testutil::Hello;
using testutil::TcpServer;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

const std::vector<PortSpec> kHttp = {{"http", 80}};
const std::vector<PortSpec> kBackendHttp = {{"http", 8080}};

// A client thread calling Hello() in a loop until destroyed, counting answers and failures.
class Load {
 public:
  explicit Load(const std::string& to)
      : thread_([this, to] {
          while (!stop_) {
            (Hello(to).empty() ? failed : ok)++;
          }
        }) {}
  ~Load() {
    stop_ = true;
    thread_.join();
  }
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// An EndpointSlice with explicit conditions and node names.
struct Endpoint {
  std::string ip;
  std::string node = "node1";
  bool ready = true;
  bool terminating = false;
};
std::string Slice(const std::string& service, const std::vector<Endpoint>& endpoints) {
  std::string out = absl::StrCat(
      "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ", service,
      "-x\n  namespace: test\n  labels:\n    kubernetes.io/service-name: ", service,
      "\naddressType: IPv4\nendpoints:\n");
  for (const auto& e : endpoints) {
    absl::StrAppend(&out, "- addresses: [\"", e.ip, "\"]\n  nodeName: ", e.node,
                    "\n  conditions: {ready: ", e.ready ? "true" : "false",
                    ", serving: true, terminating: ", e.terminating ? "true" : "false", "}\n");
  }
  return out + "ports:\n- name: http\n  protocol: TCP\n  port: 8080\n";
}

class SocketLbTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!IsSkipped()) {
      UseSocketLb();
    }
  }
  // Backends a, b, c (kHello) on 127.0.0.2-4:8080.
  void StartBackends() {
    for (const char* name : {"a", "b", "c"}) {
      const std::string ip = absl::StrCat("127.0.0.", 2 + (name[0] - 'a'));
      backends_.push_back(TcpServer::Start(Addr(ip + ":8080"), TcpServer::Mode::kHello, 0, name));
      ASSERT_TRUE(backends_.back());
    }
  }
  std::vector<std::unique_ptr<TcpServer>> backends_;
};

TEST_F(SocketLbTest, GetpeernameReportsTheServiceAddressV4V6AndMapped) {
  auto v4 = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kEcho);
  auto v6 = TcpServer::Start(Addr("[::1]:8080"), TcpServer::Mode::kEcho);
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10", "fd00::10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp) + "---\n" +
                        SliceYaml("web", {"::1"}, kBackendHttp, "IPv6"));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  ASSERT_TRUE(WaitListener("tcp/[fd00::10]:80"));
  // An IPv4 socket, an IPv6 one, and a dual-stack IPv6 socket reaching the IPv4 service
  // through its mapped address.
  for (const auto& [family, to] :
       std::vector<std::pair<int, std::string>>{{AF_INET, "10.96.0.10:80"},
                                                {AF_INET6, "[fd00::10]:80"},
                                                {AF_INET6, "::ffff:10.96.0.10"}}) {
    SCOPED_TRACE(to);
    base::UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    socklen_t len;
    if (to[0] == ':') {  // SocketAddress would normalise it to IPv4
      sockaddr_in6 mapped{.sin6_family = AF_INET6, .sin6_port = htons(80)};
      inet_pton(AF_INET6, to.c_str(), &mapped.sin6_addr);
      std::memcpy(&ss, &mapped, sizeof(mapped));
      len = sizeof(mapped);
    } else {
      len = Addr(to).ToSockaddr(&ss);
    }
    ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << strerror(errno);
    auto peer = net::PeerAddress(fd.get());
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ(*peer, Addr(to[0] == ':' ? "10.96.0.10:80" : to));  // mapped reads back as IPv4
    char c = 'p';  // and the bytes really reach a backend
    ASSERT_EQ(send(fd.get(), &c, 1, MSG_NOSIGNAL), 1);
    ASSERT_EQ(recv(fd.get(), &c, 1, 0), 1);
  }
  EXPECT_EQ(SocketLbTranslations("test/web:http"), 3);
  EXPECT_EQ(MetricValue("sluice_connections_total"), 0);
}

TEST_F(SocketLbTest, InternalTrafficPolicyLocalAndTerminatingFallback) {
  StartBackends();
  // a is on this node, b on another: Local keeps only a.
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp, "  internalTrafficPolicy: Local\n") +
                        "---\n" + Slice("web", {{"127.0.0.2"}, {"127.0.0.3", "node2"}}));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Hello("10.96.0.10:80"), "a") << i;
  }
  // No ready endpoint left: the serving, terminating one (c) takes the traffic.
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        Slice("web", {{"127.0.0.2", "node1", false, true},
                                      {"127.0.0.4", "node1", false, true}}));
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Get("/debug/services").find("\"internalTrafficPolicy\": \"Cluster\"") !=
               std::string::npos;
      },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  std::set<std::string> seen;
  for (int i = 0; i < 6; ++i) {
    seen.insert(Hello("10.96.0.10:80"));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"a", "c"}));
}

// externalTrafficPolicy: Local keeps remote clients of a LoadBalancer IP on this node's
// endpoints; a client on the node itself reaches the service as through its ClusterIP, as
// kube-proxy's short-circuit does, even with no endpoint here.
TEST_F(SocketLbTest, LocalClientsOfAnExternalTrafficPolicyLocalServiceReachEveryEndpoint) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp,
                                "  type: LoadBalancer\n  externalTrafficPolicy: Local\n") +
                        "status:\n  loadBalancer:\n    ingress:\n    - ip: 10.97.0.5\n---\n" +
                        Slice("web", {{"127.0.0.3", "node2"}}));
  StartAgent();
  ASSERT_TRUE(WaitSocketLb("tcp/10.97.0.5:80")) << Get("/debug/services");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Hello("10.97.0.5:80"), "b") << i;
  }
  EXPECT_EQ(Hello("10.96.0.10:80"), "b");
  EXPECT_EQ(MetricValue("sluice_connections_total"), 0);
}

TEST_F(SocketLbTest, AffinityTimesOut) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp,
                                "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n"
                                "    clientIP:\n      timeoutSeconds: 1\n") +
                        "---\n" + SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  // A Hello, and whether its connect surely came within the 1 s timeout of the one before
  // (from that one's start to this one's end): a loaded machine can stall this thread past it,
  // which rightly lets the affinity lapse, and then round-robin picks again.
  absl::Time last_start = absl::Now();
  auto hello = [&](bool* within) {
    const absl::Time start = absl::Now();
    std::string name = Hello("10.96.0.10:80");
    *within = absl::Now() - last_start < absl::Seconds(1);
    last_start = start;
    return name;
  };
  bool within;
  std::string current = hello(&within);
  int held = 0;
  for (int tries = 0; held < 4 && tries < 40; ++tries) {
    const std::string name = hello(&within);
    if (within) {
      EXPECT_EQ(name, current);
      ++held;
    }
    current = name;
  }
  EXPECT_EQ(held, 4) << "no four connections within 1 s of each other";
  // The timeout is the behaviour under test: let it pass without a connection (which would
  // slide it). Round-robin then moves on to the other backend.
  absl::SleepFor(absl::Milliseconds(1500));
  const std::string second = hello(&within);
  EXPECT_NE(second, current);
  const std::string again = hello(&within);
  if (within) {
    EXPECT_EQ(again, second);
  }
}

// Endpoints change under a steady stream of new connections: none fails while one endpoint is
// ready, new connections follow the change, an established one is untouched.
TEST_F(SocketLbTest, EndpointChurnUnderLoadLosesNothing) {
  StartBackends();
  auto echo = TcpServer::Start(Addr("127.0.0.5:8080"), TcpServer::Mode::kEcho);
  auto slice = [](const std::vector<std::string>& ips) {
    return ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
           SliceYaml("web", ips, kBackendHttp);
  };
  Write("web.yaml", slice({"127.0.0.5"}));
  StartAgent({"--min-sync-period=0s"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  int err = 0;
  auto established = ConnectTcp(Addr("10.96.0.10:80"), &err);  // to the echo backend
  ASSERT_TRUE(established) << strerror(err);
  Write("web.yaml", slice({"127.0.0.2"}));
  ASSERT_TRUE(testutil::WaitFor([&] { return Hello("10.96.0.10:80") == "a"; }, absl::Seconds(10)));

  auto load = std::make_unique<Load>("10.96.0.10:80");
  const std::vector<std::vector<std::string>> versions = {{"127.0.0.2", "127.0.0.3"},
                                                          {"127.0.0.3", "127.0.0.4"},
                                                          {"127.0.0.4"},
                                                          {"127.0.0.2", "127.0.0.4"},
                                                          {"127.0.0.3"},
                                                          {"127.0.0.2"}};
  for (int round = 0; round < 3; ++round) {
    for (const auto& v : versions) {
      Write("web.yaml", slice(v));
      const int before = load->ok;
      ASSERT_TRUE(testutil::WaitFor([&] { return load->ok >= before + 5; }, absl::Seconds(10)));
    }
  }
  // The last version has only a: once it is applied (/debug/services shows a table when it is
  // in the kernel), new connections follow it. (Waiting for one answer from a is not enough:
  // an earlier version with a and c answers a every other time.)
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Get("/debug/services").find("\"clusterEndpoints\": [\"127.0.0.2:8080\"]") !=
               std::string::npos;
      },
      absl::Seconds(10)));
  const int failed = load->failed;
  const int ok = load->ok;
  load.reset();
  EXPECT_EQ(failed, 0) << ok << " succeeded";
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  }
  char c = 'e';
  ASSERT_EQ(send(established.get(), &c, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(established.get(), &c, 1, 0), 1);  // the echo backend left long ago
  EXPECT_EQ(c, 'e');
}

// kill -9 and restart: pod -> service traffic never stops (the pinned programs and maps stay
// attached), and the new agent adopts and reprograms them.
TEST_F(SocketLbTest, AgentKillAndRestartKeepsTranslating) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  auto load = std::make_unique<Load>("10.96.0.10:80");
  ASSERT_TRUE(testutil::WaitFor([&] { return load->ok > 10; }, absl::Seconds(10)));
  agent_->Signal(SIGKILL);
  agent_->Wait(absl::Seconds(10));
  const int at_kill = load->ok;
  ASSERT_TRUE(testutil::WaitFor([&] { return load->ok > at_kill + 50; }, absl::Seconds(10)));
  StartAgent();
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return agent_->Output().find("adopted the pinned programs and maps") != std::string::npos;
      },
      absl::Seconds(10)))
      << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  // The new agent programs the adopted maps.
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.3"}, kBackendHttp));
  EXPECT_TRUE(testutil::WaitFor([&] { return Hello("10.96.0.10:80") == "b"; }, absl::Seconds(10)));
  const int failed = load->failed;
  load.reset();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(Hello("10.96.0.10:80"), "b");
  EXPECT_GT(SocketLbTranslations("test/web:http"), 0);  // the new agent's counters
}

// --socket-lb=off on restart removes what the earlier agent pinned: the proxy serves again.
// --cleanup removes the pins, the VIPs and the service-CIDR routes.
TEST_F(SocketLbTest, OffAndCleanupRemoveThePins) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent({"--keep-vips"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0);
  auto pins = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(bpffs_->path())) {
      n += e.path().filename().string().rfind("link_sluice_", 0) == 0;
    }
    return n;
  };
  EXPECT_EQ(pins(), 8);                    // one link per hook
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");  // still translated with no agent running

  StartAgent({"--socket-lb=off", "--bpf-root=" + bpffs_->path()});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  EXPECT_EQ(pins(), 0);
  // Unpinned links detach moments later (the kernel frees bpffs inodes after an RCU grace
  // period): then connections go through the proxy.
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return Hello("10.96.0.10:80") == "a" && MetricValue("sluice_connections_total") > 0; },
      absl::Seconds(10)));
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"disabled\"}"), 1);
  EXPECT_EQ(Get("/proxyMode").find("socket-lb"), std::string::npos);
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0);

  // A socket-LB agent again, with a service CIDR routed (the VIP outside it stays an
  // address), killed: then --cleanup, as a kube-proxy DaemonSet's cleanup runs it.
  StartAgent({"--service-cluster-ip-range=10.97.0.0/16"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  agent_->Signal(SIGKILL);
  agent_->Wait(absl::Seconds(10));
  EXPECT_EQ(pins(), 8);  // one link per hook
  auto local_routes = [] {
    std::string routes;
    testutil::RunCommand({"ip", "-o", "route", "show", "table", "local"}, &routes);
    return routes;
  };
  ASSERT_NE(local_routes().find("10.97.0.0/16"), std::string::npos) << local_routes();
  std::string out;
  const std::string kube_proxy =
      (std::filesystem::path(SLUICE_AGENT_BINARY).parent_path() / "kube-proxy").string();
  EXPECT_EQ(testutil::RunCommand({kube_proxy, "--cleanup", "--bpf-root=" + bpffs_->path(),
                                  "--vip-interface=lo", "--service-cluster-ip-range=10.97.0.0/16"},
                                 &out),
            0)
      << out;
  EXPECT_EQ(pins(), 0);
  std::string addrs;
  testutil::RunCommand({"ip", "-o", "addr", "show", "dev", "lo"}, &addrs);
  EXPECT_EQ(addrs.find("10.96.0.10"), std::string::npos) << addrs;
  EXPECT_EQ(local_routes().find("10.97.0.0/16"), std::string::npos) << local_routes();
  int err = 0;
  EXPECT_TRUE(testutil::WaitFor([&] { return Hello("10.96.0.10:80", &err).empty(); },
                                absl::Seconds(10)));  // neither translated nor proxied
}

// --socket-lb=auto falling back (here: not a cgroup v2 directory) after an agent that pinned
// its hooks: the hooks are detached and the pins removed at once, so no stale translation
// outlives it (seen on a node: a backend recreated with a new IP was unreachable from every
// pod); the proxy serves.
TEST_F(SocketLbTest, AutoFallingBackRemovesWhatAnEarlierAgentPinned) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent({"--keep-vips"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  agent_->Signal(SIGKILL);
  agent_->Wait(absl::Seconds(10));
  auto pins = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(bpffs_->path())) {
      n += e.path().filename().string().rfind("link_sluice_", 0) == 0 ||
           e.path().filename().string().rfind("sluice_lb_", 0) == 0;
    }
    return n;
  };
  ASSERT_GT(pins(), 8);
  // The backend moves while no agent runs: the pinned maps still name the old address.
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.3"}, kBackendHttp));
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");

  StartAgent({"--socket-lb=auto", "--socket-lb-cgroup=" + dir_});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", true)) << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"cgroup\"}"), 1);
  EXPECT_EQ(pins(), 0);
  EXPECT_EQ(Hello("10.96.0.10:80"), "b");  // the proxy, with the current endpoints
  EXPECT_EQ(MetricValue("sluice_connections_total"), 1);
  EXPECT_NE(agent_->Output().find("hooks detached"), std::string::npos) << agent_->Output();
}

// The DaemonSet's init step (`--init-only`, which mounts a bpffs and cgroup2 where the node has
// none) and then the agent, on node layouts it must work on, each in private mount and cgroup
// namespaces with a read-only tmpfs standing for the node's /sys/fs (so sysfs's "no mkdir" is
// there too): cgroup2 at fs/cgroup (unified), at fs/cgroup/unified (hybrid), or nowhere; never a
// bpffs at fs/bpf. The cgroup namespace makes a new cgroup2 mount show the test's own cgroup,
// never the machine's root.
class NodeLayoutTest : public SocketLbTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(NodeLayoutTest, InitStepAndAgentRunSocketLb) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  const std::string node = dir_ + "/node";
  ASSERT_TRUE(std::filesystem::create_directory(node));
  const std::string fs = node + "/fs";
  std::string setup = absl::StrCat("mount -t tmpfs none ", node, " && mkdir -p ", fs, "/bpf ", fs,
                                   "/cgroup/unified");
  if (GetParam() == "unified") {
    absl::StrAppend(&setup, " && mount -t cgroup2 none ", fs, "/cgroup");
  } else if (GetParam() == "hybrid") {
    absl::StrAppend(&setup, " && mount -t cgroup2 none ", fs, "/cgroup/unified");
  }
  absl::StrAppend(&setup, " && mount -o remount,ro ", node);
  const std::vector<std::string> node_flags = {"--bpf-root=" + fs + "/bpf/sluice",
                                               "--socket-lb-cgroup=" + fs + "/cgroup"};
  // As deploy/base/daemonset.yaml's init container runs it.
  const std::string init = absl::StrCat("\"$0\" --init-only --socket-lb=on --strict-arp=false ",
                                        node_flags[0], " ", node_flags[1]);
  StartAgent({"--socket-lb=on", node_flags[0], node_flags[1]},
             {"unshare", "--cgroup", "--mount", "--", "sh", "-c",
              setup + " && " + init + " && exec \"$0\" \"$@\""});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_EQ(Get("/proxyMode").find("socket-lb") != std::string::npos, true) << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  EXPECT_EQ(SocketLbTranslations("test/web:http"), 1);
  const std::string log = agent_->Output();
  EXPECT_NE(log.find(fs + "/bpf was not on a bpffs: mounted one there"), std::string::npos) << log;
  if (GetParam() != "unified") {
    EXPECT_NE(log.find("attaching to " + fs + "/cgroup/unified"), std::string::npos) << log;
  }
  if (GetParam() == "none") {
    EXPECT_NE(log.find("mounted cgroup2 on " + fs + "/cgroup/unified"), std::string::npos) << log;
  }
  agent_->Signal(SIGTERM);
  EXPECT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
}

INSTANTIATE_TEST_SUITE_P(Layouts, NodeLayoutTest, ::testing::Values("unified", "hybrid", "none"),
                         [](const auto& info) { return info.param; });

// --socket-lb-host-netns-only: a client in another network namespace (a pod behind a service
// mesh sidecar) keeps the service address; the agent's own namespace is translated.
TEST_F(SocketLbTest, HostNetnsOnlyLeavesOtherNamespacesAlone) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent({"--socket-lb-host-netns-only"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  EXPECT_EQ(SocketLbTranslations("test/web:http"), 1);
  std::string in_pod;
  std::thread pod([&] {
    // The "pod": its own namespace with a server on the service address itself, which only an
    // untranslated connect reaches.
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    ASSERT_EQ(testutil::RunCommand({"ip", "addr", "add", "10.96.0.10/32", "dev", "lo"}), 0);
    auto sidecar = TcpServer::Start(Addr("10.96.0.10:80"), TcpServer::Mode::kHello, 0, "mesh");
    ASSERT_TRUE(sidecar);
    in_pod = Hello("10.96.0.10:80");
  });
  pod.join();
  EXPECT_EQ(in_pod, "mesh");
  EXPECT_EQ(SocketLbTranslations("test/web:http"), 1);
}

TEST_F(SocketLbTest, RandomAlgorithmReachesEveryBackend) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
  StartAgent({"--socket-lb-algorithm=random"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  std::set<std::string> seen;
  for (int i = 0; i < 40 && seen.size() < 2; ++i) {  // all on one: p = 2^-39
    seen.insert(Hello("10.96.0.10:80"));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b"}));
}

// A container's cgroup namespace shows the container's own cgroup as the cgroup2 mount's root:
// programs attached there would miss every other process of the node. The default
// (--socket-lb-cgroup unset) must notice and refuse, not attach.
TEST_F(SocketLbTest, RefusesAContainersCgroupAsTheRoot) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  // In private cgroup and mount namespaces (as a container has), cgroup2 mounted anew.
  const std::string at = *socklb::FindCgroup2Mount();
  const std::string mount = "umount -l " + at + " && mount -t cgroup2 none " + at;
  StartAgent(
      {"--socket-lb=auto", "--socket-lb-cgroup="},
      {"unshare", "--cgroup", "--mount", "--", "sh", "-c", mount + " && exec \"$0\" \"$@\""});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"cgroup\"}"), 1) << agent_->Output();
  EXPECT_NE(agent_->Output().find("is not the root of the cgroup v2 hierarchy"), std::string::npos)
      << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");  // the proxy serves
  EXPECT_EQ(MetricValue("sluice_connections_total"), 1);
}

// The capabilities deploy/base/daemonset.yaml grants ("add: [...]" under "drop: ["ALL"]"), as
// setpriv bounding-set terms: "-all,+net_admin,...".
std::string DaemonSetCapabilities() {
  std::ifstream in(SLUICE_DEPLOY_DIR "/base/daemonset.yaml");
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find("add: [");
    if (at == std::string::npos) {
      continue;
    }
    std::string list = line.substr(at + 6, line.find(']') - at - 6);
    list = absl::AsciiStrToLower(absl::StrReplaceAll(list, {{"\"", ""}, {" ", ""}}));
    return "-all,+" + absl::StrReplaceAll(list, {{",", ",+"}});
  }
  return "";
}

// The DaemonSet's capabilities are all the kernel paths need: with exactly those, the agent
// runs sockmap and socket LB; with the two the manifest used to grant, it falls back to splice
// and no socket LB, and says why.
TEST_F(SocketLbTest, TheDaemonSetsCapabilitiesRunBothKernelPaths) {
  const std::string caps = DaemonSetCapabilities();
  ASSERT_EQ(caps, "-all,+net_admin,+net_bind_service,+bpf,+perfmon");
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent({"--socket-lb=auto"}, {"setpriv", "--bounding-set=" + caps, "--"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_EQ(Get("/proxyMode"), "sockmap+socket-lb") << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  EXPECT_EQ(SocketLbTranslations("test/web:http"), 1);
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();

  StartAgent({"--socket-lb=auto"},
             {"setpriv", "--bounding-set=-all,+net_admin,+net_bind_service", "--"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_EQ(Get("/proxyMode"), "splice");
  EXPECT_EQ(MetricValue("sluice_sockmap_unavailable{reason=\"permission\"}"), 1);
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"permission\"}"), 1);
  const std::string log = agent_->Output();
  EXPECT_NE(log.find("socket-lb auto: off, unavailable (permission): missing CAP_BPF"),
            std::string::npos)
      << log;
}

// Unavailable: --socket-lb=auto falls back to the proxy and says why; =on refuses to start.
TEST_F(SocketLbTest, AutoFallsBackToTheProxyAndOnRefuses) {
  StartBackends();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  // Not a cgroup v2 directory: the start-up check fails.
  StartAgent({"--socket-lb=auto", "--socket-lb-cgroup=" + dir_});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", true)) << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  EXPECT_EQ(MetricValue("sluice_connections_total"), 1);
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"cgroup\"}"), 1);
  EXPECT_EQ(Get("/proxyMode").find("socket-lb"), std::string::npos);
  EXPECT_NE(agent_->Output().find("socket-lb auto: off, unavailable (cgroup)"), std::string::npos)
      << agent_->Output();
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0);

  // Without CAP_BPF (and CAP_SYS_ADMIN, which stands in for it).
  StartAgent({"--socket-lb=auto", "--datapath=splice"},
             {"setpriv", "--bounding-set=-bpf,-sys_admin", "--"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", true)) << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_socket_lb_unavailable{reason=\"permission\"}"), 1);
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0);

  agent_ = std::make_unique<testutil::Subprocess>(std::vector<std::string>{
      SLUICE_AGENT_BINARY, "--source=file:" + dir_,
      "--healthz-bind-address=", "--metrics-bind-address=", "--socket-lb=on",
      "--socket-lb-cgroup=" + dir_, "--bpf-root=", "--external-datapath=proxy"});
  EXPECT_NE(agent_->Wait(absl::Seconds(10)), 0);
  EXPECT_NE(agent_->Output().find("--socket-lb=on: socket-level balancing is unavailable (cgroup)"),
            std::string::npos)
      << agent_->Output();
}

}  // namespace
}  // namespace sluice::testing
