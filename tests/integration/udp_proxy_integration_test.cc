// SPDX-License-Identifier: Apache-2.0
// The UDP data path end to end through the real sluice-agent in a private network namespace.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/unique_fd.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

// A UDP echo backend that prefixes replies with its name, on its own thread.
class UdpEcho {
 public:
  UdpEcho(const std::string& bind, std::string name) : name_(std::move(name)) {
    fd_.Reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    socklen_t len = Addr(bind).ToSockaddr(&ss);
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
    thread_ = std::thread([this] {
      std::string buf(65536, '\0');
      while (!stop_) {
        pollfd p{fd_.get(), POLLIN, 0};
        if (poll(&p, 1, 50) != 1) {
          continue;
        }
        sockaddr_storage from;
        socklen_t flen = sizeof(from);
        ssize_t n = recvfrom(fd_.get(), buf.data(), buf.size(), 0,
                             reinterpret_cast<sockaddr*>(&from), &flen);
        if (n >= 0) {
          std::string reply = name_ + ":" + buf.substr(0, static_cast<size_t>(n));
          sendto(fd_.get(), reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from),
                 flen);
        }
      }
    });
  }
  ~UdpEcho() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::string name_;
  base::UniqueFd fd_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A connected UDP client: ICMP port unreachable then shows up as ECONNREFUSED.
struct UdpClient {
  explicit UdpClient(const std::string& to) {
    fd.Reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    socklen_t len = Addr(to).ToSockaddr(&ss);
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  }
  // Sends and waits up to 500 ms for a reply; returns it, or "" with *err set.
  std::string Ask(const std::string& msg, int* err = nullptr) {
    send(fd.get(), msg.data(), msg.size(), 0);
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, 500) != 1) {
      if (err != nullptr) {
        *err = ETIMEDOUT;
      }
      return "";
    }
    std::string buf(70000, '\0');
    ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
    if (n < 0) {
      if (err != nullptr) {
        *err = errno;
      }
      return "";
    }
    return buf.substr(0, static_cast<size_t>(n));
  }
  base::UniqueFd fd;
};

const std::vector<PortSpec> kDns = {{"dns", 53, "UDP"}, {"dns-tcp", 53, "TCP"}};
const std::vector<PortSpec> kBackendDns = {{"dns", 5300, "UDP"}, {"dns-tcp", 5300, "TCP"}};

// The UDP data paths: the proxy's flow table, and socket-level balancing.
class UdpProxyTest : public DatapathTest {};
INSTANTIATE_TEST_SUITE_P(Paths, UdpProxyTest, ::testing::Values("splice", "socket-lb"),
                         DatapathName);

// An unconnected UDP client (sendto/recvfrom), as many DNS resolvers are.
struct UdpSender {
  UdpSender() { fd.Reset(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)); }
  // Sends `msg` to `to`; returns sendto's errno, or 0.
  int Send(const std::string& to, const std::string& msg) {
    sockaddr_storage ss;
    socklen_t len = Addr(to).ToSockaddr(&ss);
    return sendto(fd.get(), msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) < 0
               ? errno
               : 0;
  }
  // Waits up to 500 ms for a datagram; returns it and where it came from ("" if none).
  std::pair<std::string, std::string> Receive() {
    pollfd p{fd.get(), POLLIN, 0};
    if (poll(&p, 1, 500) != 1) {
      return {};
    }
    std::string buf(70000, '\0');
    sockaddr_storage from;
    socklen_t len = sizeof(from);
    ssize_t n =
        recvfrom(fd.get(), buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    auto src = net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), len);
    if (n < 0 || !src) {
      return {};
    }
    return {buf.substr(0, static_cast<size_t>(n)), src->ToString()};
  }
  base::UniqueFd fd;
};

TEST_P(UdpProxyTest, LargeDatagramsRepliesFromTheServiceAddressAndTcpOnTheSamePort) {
  UdpEcho echo("127.0.0.2:5300", "a");
  auto tcp = testutil::TcpServer::Start(Addr("127.0.0.2:5300"), testutil::TcpServer::Mode::kHello,
                                        0, "tcp");
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  StartAgent();
  ASSERT_TRUE(WaitListener("udp/10.96.0.30:53"));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.30:53"));
  UdpClient client("10.96.0.30:53");  // connected: replies from anywhere else would be dropped
  for (size_t size : {size_t{1}, size_t{2000}, size_t{65000}}) {
    const std::string msg(size, 'x');
    EXPECT_EQ(client.Ask(msg), "a:" + msg) << size;
  }
  int err = 0;
  auto fd = testutil::ConnectTcp(Addr("10.96.0.30:53"), &err);
  ASSERT_TRUE(fd) << strerror(err);
  char buf[8] = {};
  EXPECT_EQ(recv(fd.get(), buf, sizeof(buf), 0), 3);
  if (socket_lb()) {  // straight to the backend, no flow in the proxy
    EXPECT_EQ(SocketLbTranslations("test/dns:dns"), 1);  // the connect()
    EXPECT_EQ(MetricValue("sluice_udp_flows_total"), 0);
  } else {
    EXPECT_GE(MetricValue("sluice_udp_flows_total"), 1);
  }
}

// Unconnected: each sendto() is translated, and recvfrom() reports the service address, not
// the backend's, as the source (a resolver drops answers from an address it did not ask).
TEST_P(UdpProxyTest, UnconnectedClientSeesRepliesFromTheServiceAddress) {
  UdpEcho a("127.0.0.2:5300", "a");
  UdpEcho b("127.0.0.3:5300", "b");
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.2", "127.0.0.3"}, kBackendDns));
  StartAgent();
  ASSERT_TRUE(WaitListener("udp/10.96.0.30:53"));
  UdpSender client;
  std::set<std::string> names;
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(client.Send("10.96.0.30:53", "q"), 0);
    auto [reply, from] = client.Receive();
    ASSERT_FALSE(reply.empty()) << i;
    EXPECT_EQ(from, "10.96.0.30:53");
    names.insert(reply.substr(0, 1));
  }
  if (socket_lb()) {
    // Every datagram is balanced on its own: one socket reaches both backends.
    EXPECT_EQ(names.size(), 2u);
    EXPECT_EQ(SocketLbTranslations("test/dns:dns"), 6);
  }
}

TEST_P(UdpProxyTest, NoEndpointsIsPortUnreachableAndAClientKeepsWorkingOnceOneIsReady) {
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns));
  StartAgent();
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return Get("/debug/services").find("test/dns") != std::string::npos; },
      absl::Seconds(10)));
  ASSERT_TRUE(WaitSocketLb("udp/10.96.0.30:53"));
  ASSERT_TRUE(WaitVip("10.96.0.30"));
  UdpClient client("10.96.0.30:53");
  int err = 0;
  EXPECT_EQ(client.Ask("hello", &err), "");
  EXPECT_EQ(err, ECONNREFUSED);
  if (socket_lb()) {
    // An unconnected sendto() is refused at once. (A connect()ed socket was left to the
    // proxy above, so that it keeps working once an endpoint is ready.)
    UdpSender sender;
    EXPECT_EQ(sender.Send("10.96.0.30:53", "x"), ECONNREFUSED);
  }
  // The e2e "preserve UDP traffic when initial unready endpoints get ready": the same client
  // socket, still sending, is answered once an endpoint is ready.
  UdpEcho echo("127.0.0.2:5300", "late");
  Write("slice.yaml", SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  EXPECT_TRUE(
      testutil::WaitFor([&] { return client.Ask("again") == "late:again"; }, absl::Seconds(10)));
}

TEST_P(UdpProxyTest, IdleFlowsCloseAfterTheTimeout) {
  if (socket_lb()) {
    GTEST_SKIP() << "socket LB keeps no flows: the client's socket talks to the backend itself";
  }
  UdpEcho echo("127.0.0.2:5300", "a");
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  StartAgent({"--udp-idle-timeout=300ms"});
  ASSERT_TRUE(WaitListener("udp/10.96.0.30:53"));
  UdpClient client("10.96.0.30:53");
  EXPECT_EQ(client.Ask("x"), "a:x");
  EXPECT_EQ(MetricValue("sluice_udp_flows"), 1);
  EXPECT_TRUE(
      testutil::WaitFor([&] { return MetricValue("sluice_udp_flows") == 0; }, absl::Seconds(5)));
  EXPECT_EQ(client.Ask("y"), "a:y");  // a new flow
}

TEST_P(UdpProxyTest, FlowMovesWhenItsEndpointIsRemoved) {
  UdpEcho a("127.0.0.2:5300", "a");
  UdpEcho b("127.0.0.3:5300", "b");
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  StartAgent();
  ASSERT_TRUE(WaitListener("udp/10.96.0.30:53"));
  UdpClient client("10.96.0.30:53");
  EXPECT_EQ(client.Ask("1"), "a:1");
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.3"}, kBackendDns));
  if (socket_lb()) {
    // The socket was connected to a itself: the agent closes it (ECONNABORTED) so that the
    // client opens a new one, which reaches b. Kernels before 6.5 cannot (documented gap).
    if (Get("/metrics").find("sluice_socket_lb_stale_udp_closed_total") == std::string::npos) {
      GTEST_SKIP() << "no bpf_sock_destroy on this kernel";
    }
    int err = 0;
    EXPECT_TRUE(testutil::WaitFor(
        [&] { return client.Ask("2", &err).empty() && err == ECONNABORTED; }, absl::Seconds(10)))
        << strerror(err);
    UdpClient fresh("10.96.0.30:53");
    EXPECT_EQ(fresh.Ask("3"), "b:3");
    return;
  }
  EXPECT_TRUE(testutil::WaitFor([&] { return client.Ask("2") == "b:2"; }, absl::Seconds(10)));
}

// 40,000 datagrams from one client IP, each from a new source port, filled the flow tables of
// every worker (and, over 20,000 descriptors, left none for TCP) for the 30 s idle timeout: no
// other client was answered. Now the flooder holds --udp-max-source-flows-per-worker flows (its
// new ones replace its own oldest) and the others are served, TCP included.
class UdpLimitsTest : public AgentTest {};

TEST_F(UdpLimitsTest, FloodFromOneSourceLeavesOtherClientsServed) {
  UdpEcho echo("127.0.0.2:5300", "a");
  auto tcp = testutil::TcpServer::Start(Addr("127.0.0.2:5300"), testutil::TcpServer::Mode::kHello,
                                        0, "tcp");
  ASSERT_TRUE(tcp);
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns) + "---\n" +
                        SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  StartAgent({}, {"prlimit", "--nofile=20000", "--"});
  ASSERT_TRUE(WaitListener("udp/10.96.0.30:53"));
  sockaddr_storage vip;
  const socklen_t vip_len = Addr("10.96.0.30:53").ToSockaddr(&vip);
  sockaddr_storage flooder;
  const socklen_t flooder_len = Addr("127.0.0.5:0").ToSockaddr(&flooder);
  for (int i = 0; i < 40000; ++i) {  // a new source port each time
    base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ASSERT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&flooder), flooder_len), 0);
    sendto(fd.get(), "q", 1, 0, reinterpret_cast<sockaddr*>(&vip), vip_len);
  }
  // Another client: its datagram may queue behind the flood's, so it asks until answered.
  UdpClient client("10.96.0.30:53");
  EXPECT_TRUE(testutil::WaitFor([&] { return client.Ask("ok?") == "a:ok?"; }, absl::Seconds(10)))
      << agent_->Output();
  int err = 0;
  EXPECT_EQ(testutil::Hello("10.96.0.30:53", &err), "tcp") << strerror(err);
  EXPECT_GT(MetricValue("sluice_udp_flows_evicted_total"), 0);
  EXPECT_LE(MetricValue("sluice_udp_flows"), 2 * 4096 + 1);  // the default, on two workers
}

}  // namespace
}  // namespace sluice::testing
