// SPDX-License-Identifier: Apache-2.0
// SocketBalancing (the socket-LB consumer of the proxier's deltas) over a real SocketLb: the
// programs attach to a test cgroup this process is moved into, in a private network namespace.
// Without root, cgroup v2 or the kernel's socket-address hooks it skips.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/control/proxier/fake_proxier.h"
#include "agent/control/proxier/socket_balancing.h"
#include "agent/dataplane/socklb/socket_lb.h"
#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::proxier {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

// "ns/<name>:http" on `cluster_ip`:`port` with `endpoints`.
ServicePortInfoPtr Port(const char* name, const char* cluster_ip, int port,
                        std::vector<net::SocketAddress> endpoints) {
  auto info = std::make_shared<ServicePortInfo>();
  info->name = ServicePortName{{"ns", name}, "http", config::Protocol::kTcp};
  info->port = port;
  info->cluster_ips = {*net::IpAddress::Parse(cluster_ip)};
  info->cluster_endpoints = info->external_endpoints = std::move(endpoints);
  return info;
}

std::shared_ptr<const ServiceTable> Table(const std::vector<ServicePortInfoPtr>& ports) {
  std::map<ServicePortName, ServicePortInfoPtr> map;
  for (const auto& p : ports) {
    map.emplace(p->name, p);
  }
  return std::make_shared<const ServiceTable>(map);
}

class SocketBalancingKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root";
    }
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    netns_ = std::move(*ns);
    auto cg = testutil::TestCgroup::Create();
    if (!cg.ok()) {
      GTEST_SKIP() << "no test cgroup: " << cg.status();
    }
    cgroup_ = std::move(*cg);
    auto lb = socklb::SocketLb::Create({.cgroup = cgroup_->path()});
    if (!lb.ok()) {
      GTEST_SKIP() << "socket-level balancing unavailable here: " << lb.status();
    }
    lb_ = std::move(*lb);
    backend_ = testutil::TcpServer::Start(Addr("127.0.0.2:8080"), testutil::TcpServer::Mode::kHello,
                                          0, "be");
    ASSERT_TRUE(backend_);
  }
  void TearDown() override {
    balancing_.reset();
    lb_.reset();
    backend_.reset();
    cgroup_.reset();
    netns_.reset();
  }
  // What a connect to `to` gets: "be" from the backend, or the error.
  static std::string Connect(const std::string& to) {
    int err = 0;
    auto fd = testutil::ConnectTcp(Addr(to), &err);
    if (!fd) {
      return strerror(err);
    }
    char buf[4];
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "no reply";
  }

  std::unique_ptr<testutil::NetNs> netns_;
  std::unique_ptr<testutil::TestCgroup> cgroup_;
  std::unique_ptr<socklb::SocketLb> lb_;
  std::unique_ptr<testutil::TcpServer> backend_;
  std::unique_ptr<SocketBalancing> balancing_;
};

// Each delta programs only its ports (added, moved to another port number, left without
// endpoints, removed); a full resync puts back what was changed behind the consumer's back.
TEST_F(SocketBalancingKernelTest, AppliesEachDeltaAndRepairsOnAFullResync) {
  balancing_ = std::make_unique<SocketBalancing>(*lb_, SocketBalancing::Options{.node_name = "n"});
  FakeProxier feed(*balancing_);
  const auto be = Addr("127.0.0.2:8080");
  auto a = Port("a", "127.255.0.1", 80, {be});
  auto b = Port("b", "127.255.0.2", 80, {be});
  ASSERT_TRUE(feed.Apply(Table({a})).ok());  // the first two are full
  ASSERT_TRUE(feed.Apply(Table({a})).ok());
  EXPECT_EQ(Connect("127.255.0.1:80"), "be");

  ASSERT_TRUE(feed.Apply(Table({a, b})).ok());
  ASSERT_THAT(feed.changes(), ::testing::SizeIs(1));
  EXPECT_THAT(balancing_->Frontends(),
              ElementsAre(Pair("ns/a:http", ElementsAre("tcp/127.255.0.1:80")),
                          Pair("ns/b:http", ElementsAre("tcp/127.255.0.2:80"))));
  EXPECT_EQ(Connect("127.255.0.2:80"), "be");

  auto moved = Port("a", "127.255.0.1", 81, {be});
  auto empty = Port("b", "127.255.0.2", 80, {});
  ASSERT_TRUE(feed.Apply(Table({moved, empty})).ok());
  EXPECT_EQ(Connect("127.255.0.1:81"), "be");
  EXPECT_EQ(Connect("127.255.0.2:80"), strerror(ECONNREFUSED));  // refused at the socket

  ASSERT_TRUE(feed.Apply(Table({empty})).ok());
  EXPECT_THAT(balancing_->Frontends(),
              ElementsAre(Pair("ns/b:http", ElementsAre("tcp/127.255.0.2:80"))));

  // Removed behind SocketBalancing's back: a delta without changes leaves it, the periodic
  // resync (the same table again) restores it.
  ASSERT_TRUE(lb_->Apply({{"ns/b:http#c4", std::nullopt}}).ok());
  auto last = Table({empty});
  ASSERT_TRUE(feed.Apply(last).ok());
  EXPECT_THAT(balancing_->Frontends(), IsEmpty());
  ASSERT_TRUE(feed.Apply(last).ok());
  EXPECT_THAT(balancing_->Frontends(),
              ElementsAre(Pair("ns/b:http", ElementsAre("tcp/127.255.0.2:80"))));
}

}  // namespace
}  // namespace sluice::proxier
