// SPDX-License-Identifier: Apache-2.0
// The UDP data path end to end through the real sluice-agent in a private network namespace.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"

#include "agent/base/unique_fd.h"
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

class UdpProxyTest : public AgentTest {};

TEST_F(UdpProxyTest, LargeDatagramsRepliesFromTheServiceAddressAndTcpOnTheSamePort) {
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
  EXPECT_GE(MetricValue("sluice_udp_flows_total"), 1);
}

TEST_F(UdpProxyTest, NoEndpointsIsPortUnreachableAndAClientKeepsWorkingOnceOneIsReady) {
  Write("dns.yaml", ServiceYaml("dns", {"10.96.0.30"}, kDns));
  StartAgent();
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return Get("/debug/services").find("test/dns") != std::string::npos; },
      absl::Seconds(10)));
  UdpClient client("10.96.0.30:53");
  int err = 0;
  EXPECT_EQ(client.Ask("hello", &err), "");
  EXPECT_EQ(err, ECONNREFUSED);
  // The e2e "preserve UDP traffic when initial unready endpoints get ready": the same client
  // socket, still sending, is answered once an endpoint is ready.
  UdpEcho echo("127.0.0.2:5300", "late");
  Write("slice.yaml", SliceYaml("dns", {"127.0.0.2"}, kBackendDns));
  EXPECT_TRUE(
      testutil::WaitFor([&] { return client.Ask("again") == "late:again"; }, absl::Seconds(10)));
}

TEST_F(UdpProxyTest, IdleFlowsCloseAfterTheTimeout) {
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

TEST_F(UdpProxyTest, FlowMovesWhenItsEndpointIsRemoved) {
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
  EXPECT_TRUE(testutil::WaitFor([&] { return client.Ask("2") == "b:2"; }, absl::Seconds(10)));
}

}  // namespace
}  // namespace sluice::testing
