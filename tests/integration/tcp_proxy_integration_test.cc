// SPDX-License-Identifier: Apache-2.0
// The splice TCP data path end to end: the real sluice-agent, real sockets, real VIPs, each test
// in its own network namespace (tests/integration/agent_fixture.h).
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "httplib.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::Hello;
using testutil::TcpServer;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

const std::vector<PortSpec> kHttp = {{"http", 80}};
const std::vector<PortSpec> kBackendHttp = {{"http", 8080}};

class TcpProxyTest : public DatapathTest {
 protected:
  // Two named backends on 127.0.0.2:8080 and 127.0.0.3:8080 behind test/web 10.96.0.10:80.
  void StartWeb(const std::string& extra_spec = "") {
    a_ = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
    b_ = TcpServer::Start(Addr("127.0.0.3:8080"), TcpServer::Mode::kHello, 0, "b");
    ASSERT_TRUE(a_ && b_);
    Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp, extra_spec) + "---\n" +
                          SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
    StartAgent();
    ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  }
  std::unique_ptr<TcpServer> a_;
  std::unique_ptr<TcpServer> b_;
};

INSTANTIATE_TEST_SUITE_P(Paths, TcpProxyTest, ::testing::ValuesIn(kDatapaths), DatapathName);

TEST_P(TcpProxyTest, RoundRobinsOverEveryEndpoint) {
  StartWeb();
  std::multiset<std::string> seen;
  for (int i = 0; i < 10; ++i) {
    seen.insert(Hello("10.96.0.10:80"));
  }
  EXPECT_EQ(seen.count("a"), 5u);
  EXPECT_EQ(seen.count("b"), 5u);
  EXPECT_EQ(Get("/proxyMode"), WantedProxyMode());
  if (socket_lb()) {  // no proxy in the path: every connect went straight to a backend
    EXPECT_EQ(SocketLbTranslations("test/web:http"), 10);
    EXPECT_EQ(MetricValue("sluice_connections_total"), 0);
  } else {
    EXPECT_EQ(MetricValue("sluice_connections_total"), 10);
  }
}

TEST_P(TcpProxyTest, RealCurlThroughTheVip) {
  // A real HTTP client and server: curl -> 10.96.0.10:80 -> python's http.server.
  testutil::Subprocess server(
      {"python3", "-m", "http.server", "--bind", "127.0.0.2", "--directory", "/etc", "8080"});
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  std::string out;
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return testutil::RunCommand(
                   {"curl", "-sf", "--max-time", "2", "http://10.96.0.10/hostname"}, &out) == 0;
      },
      absl::Seconds(10)))
      << out;
  std::string want;
  testutil::RunCommand({"cat", "/etc/hostname"}, &want);
  EXPECT_EQ(out, want);
}

TEST_P(TcpProxyTest, RefusedWithoutEndpointsServedOnceOneAppears) {
  a_ = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp));
  StartAgent();
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return Get("/debug/services").find("test/web") != std::string::npos; },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitSocketLb("tcp/10.96.0.10:80"));
  ASSERT_TRUE(WaitVip("10.96.0.10"));
  int err = 0;
  const absl::Time start = absl::Now();
  EXPECT_EQ(Hello("10.96.0.10:80", &err), "");
  EXPECT_EQ(err, ECONNREFUSED);
  // Refused by the answer to the first SYN: a lost one is sent again only after the 1 s
  // initial retransmission timeout (RFC 6298), and a timeout would take Hello's 3 s.
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(900));
  Write("slice.yaml", SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  EXPECT_EQ(Hello("10.96.0.10:80"), "a");
}

TEST_P(TcpProxyTest, PortChangeDeleteReaddAndClusterIpNoneAndBack) {
  StartWeb();
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, {{"http", 81}}) + "---\n" +
                        SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:81"));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", false));
  int err = 0;
  EXPECT_EQ(Hello("10.96.0.10:80", &err), "");
  EXPECT_EQ(err, ECONNREFUSED);
  EXPECT_NE(Hello("10.96.0.10:81"), "");

  Remove("web.yaml");
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:81", false));
  EXPECT_EQ(Hello("10.96.0.10:81", &err), "");
  EXPECT_NE(err, 0);

  Write("web.yaml", ServiceYaml("web", {"None"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  Write("web.yaml", ServiceYaml("web", {"10.96.0.11"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80"));
  EXPECT_EQ(Hello("10.96.0.11:80"), "a");
  Write("web.yaml", ServiceYaml("web", {"None"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80", false));
  EXPECT_EQ(Hello("10.96.0.11:80", &err), "");
}

TEST_P(TcpProxyTest, ExternalIpChange) {
  StartWeb("  externalIPs: [\"192.0.2.50\"]\n");
  ASSERT_TRUE(WaitListener("tcp/192.0.2.50:80"));
  EXPECT_NE(Hello("192.0.2.50:80"), "");
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp, "  externalIPs: [\"192.0.2.51\"]\n") +
                        "---\n" + SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
  ASSERT_TRUE(WaitListener("tcp/192.0.2.51:80"));
  EXPECT_NE(Hello("192.0.2.51:80"), "");
  int err = 0;
  EXPECT_EQ(Hello("192.0.2.50:80", &err), "");  // the old address is gone from the node
  EXPECT_NE(err, 0);
}

TEST_P(TcpProxyTest, DialRetriesPastADeadEndpoint) {
  if (socket_lb()) {
    GTEST_SKIP() << "socket LB connects the client to the endpoint itself: a dead one refuses "
                    "the client, as with kube-proxy's NAT; dial retries are the proxy's";
  }
  a_ = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  // 127.0.0.9:8080 has no listener: every dial there is refused and retried elsewhere.
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2", "127.0.0.9"}, kBackendHttp));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Hello("10.96.0.10:80"), "a") << i;
  }
  EXPECT_GE(MetricValue("sluice_dial_failures_total{reason=\"refused\"}"), 3);
}

TEST_P(TcpProxyTest, SessionAffinitySticksAndSwitchesOff) {
  StartWeb(
      "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n"
      "      timeoutSeconds: 60\n");
  std::set<std::string> seen;
  for (int i = 0; i < 8; ++i) {
    seen.insert(Hello("10.96.0.10:80"));
  }
  EXPECT_EQ(seen.size(), 1u);
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2", "127.0.0.3"}, kBackendHttp));
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Get("/debug/services").find("\"sessionAffinity\": \"None\"") != std::string::npos;
      },
      absl::Seconds(10)));
  seen.clear();
  for (int i = 0; i < 8; ++i) {
    seen.insert(Hello("10.96.0.10:80"));
  }
  EXPECT_EQ(seen.size(), 2u);
}

// Limits one tenant cannot push past at the others' expense (issue 26). The proxy carries the
// traffic (socket LB off), with the process's descriptors capped as on the reviewed node.
class TcpLimitsTest : public AgentTest {
 protected:
  // A blocking TCP socket from `source` connected to `to`, or an invalid fd.
  static base::UniqueFd ConnectFrom(const std::string& source, const std::string& to) {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    socklen_t len = Addr(source + ":0").ToSockaddr(&ss);
    if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return {};
    }
    len = Addr(to).ToSockaddr(&ss);
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return {};
    }
    return fd;
  }
  // Runs the agent with `flags` in front of an echo backend behind test/web 10.96.0.10:80,
  // opens `n` connections from 127.0.0.5 and keeps them (in flood_); returns how many echo.
  int StartAndFlood(int n, std::vector<std::string> flags, std::vector<std::string> prefix = {}) {
    echo_ = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kEcho);
    EXPECT_TRUE(echo_);
    Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, kHttp) + "---\n" +
                          SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
    StartAgent(std::move(flags), std::move(prefix));
    EXPECT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
    int served = 0;
    for (int i = 0; i < n; ++i) {
      flood_.push_back(ConnectFrom("127.0.0.5", "10.96.0.10:80"));
    }
    for (auto& fd : flood_) {
      served += fd && Echoes(fd.get()) ? 1 : 0;
    }
    return served;
  }
  std::unique_ptr<TcpServer> echo_;
  std::vector<base::UniqueFd> flood_;

  // True if `fd` echoes one byte within 5 s (a connection the proxy reset does not).
  static bool Echoes(int fd) {
    const timeval tv{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c = 'x';
    return send(fd, &c, 1, MSG_NOSIGNAL) == 1 && testutil::Recv(fd, &c, 1) == 1 && c == 'x';
  }
};

TEST_F(TcpLimitsTest, PerSourceCapResetsTheFloodersExtraConnectionsAndServesOthers) {
  const int served = StartAndFlood(20, {"--max-source-connections-per-worker=4"});
  // 4 per worker (2 workers): at least one worker took 10 of the 20.
  EXPECT_GE(served, 4);
  EXPECT_LE(served, 8);
  EXPECT_EQ(MetricValue("sluice_connections_source_limited_total"), 20 - served);
  // The flooder still holds its connections: another client is served.
  base::UniqueFd other = ConnectFrom("127.0.0.6", "10.96.0.10:80");
  ASSERT_TRUE(other);
  EXPECT_TRUE(Echoes(other.get()));
}

// One Service with 12,000 ports took 2 x 12,000 listeners, over the 20,000 descriptors: every
// sync failed, a Service added later was never served and /healthz went stale. Now it is over
// --max-listeners-per-service (4096 by default) and skipped whole.
TEST_F(TcpLimitsTest, ServiceOverTheListenerCapIsSkippedAndTheRestServedAndHealthy) {
  auto web = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "web");
  ASSERT_TRUE(web);
  std::vector<PortSpec> ports;
  for (int i = 0; i < 12000; ++i) {
    ports.push_back({absl::StrCat("p", i), 20000 + i});
  }
  Write("big.yaml", ServiceYaml("big", {"10.96.0.20"}, ports) + "---\n" +
                        SliceYaml("big", {"127.0.0.3"}, ports));
  const int healthz = testutil::FreePort();
  StartAgent({absl::StrCat("--healthz-bind-address=127.0.0.1:", healthz)},
             {"prlimit", "--nofile=20000", "--"});
  ASSERT_TRUE(WaitVip("10.96.0.20")) << agent_->Output();  // a sync has seen the big one
  // Added after the big one, on an address whose listener opens after its ports would.
  const absl::Time written = absl::Now();
  Write("web.yaml", ServiceYaml("web", {"10.96.1.10"}, kHttp) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, kBackendHttp));
  EXPECT_TRUE(testutil::WaitFor([&] { return Hello("10.96.1.10:80") == "web"; }, absl::Seconds(15)))
      << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_unserved_service_ports{reason=\"service_cap\"}"), 12000);
  EXPECT_LT(MetricValue("sluice_listeners"), 10);
  EXPECT_NE(Get("/debug/services").find("max-listeners-per-service"), std::string::npos);
  EXPECT_NE(agent_->Output().find("test/big"), std::string::npos) << "the skip is logged";
  // /healthz is healthy past twice --sync-period (2 s) after the write: a sync that kept
  // failing would leave the update pending and the agent unhealthy by then.
  httplib::Client client("127.0.0.1", healthz);
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        auto res = client.Get("/healthz");
        return res && res->status == 200 && absl::Now() - written > absl::Seconds(5);
      },
      absl::Seconds(15)));
}

// Connections take descriptors only from the data path's budget (the limit less --fd-reserve):
// a flood that would have taken them all leaves the control plane its own, so /metrics answers
// and established connections go on.
TEST_F(TcpLimitsTest, DescriptorReserveKeepsTheControlPlaneServing) {
  // 400 descriptors in the agent if all were served.
  const int served = StartAndFlood(200, {"--fd-reserve=100"}, {"prlimit", "--nofile=300", "--"});
  EXPECT_GT(served, 0);
  EXPECT_LT(served, 100);  // two descriptors each, from a budget of 200 less the listeners
  EXPECT_GT(MetricValue("sluice_connections_shed_total"), 0) << agent_->Output();
  EXPECT_FALSE(Get("/debug/services").empty());
}

}  // namespace
}  // namespace sluice::testing
