// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/data_path.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/metrics.h"

#include "agent/control/proxier/fake_proxier.h"
#include "agent/dataplane/vip/fake_vip_manager.h"
#include "tests/testutil/process.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::proxier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::SizeIs;

net::IpAddress Ip(const char* text) { return *net::IpAddress::Parse(text); }

// Cluster IPs on 127/8 need no VIP: the listeners bind unprivileged.
ServicePortInfoPtr Port(const char* name, const char* cluster_ip, int port, bool endpoints) {
  auto info = std::make_shared<ServicePortInfo>();
  info->name = ServicePortName{{"ns", name}, "http", config::Protocol::kTcp};
  info->port = port;
  info->cluster_ips = {Ip(cluster_ip)};
  if (endpoints) {
    info->cluster_endpoints = {*net::SocketAddress::Parse("10.0.0.1:8080")};
  }
  return info;
}

std::shared_ptr<const ServiceTable> Table(const std::vector<ServicePortInfoPtr>& ports) {
  std::map<ServicePortName, ServicePortInfoPtr> map;
  for (const auto& p : ports) {
    map.emplace(p->name, p);
  }
  return std::make_shared<const ServiceTable>(std::move(map));
}

class DataPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dp = DataPath::Create(DataPath::Options{}, vips_, metrics_);
    ASSERT_TRUE(dp.ok()) << dp.status();
    dp_ = std::move(*dp);
    feed_ = std::make_unique<FakeProxier>(*dp_);
  }

  base::Registry registry_;
  proxy::DataPathMetrics metrics_{registry_};
  vip::FakeVipManager vips_;
  std::unique_ptr<DataPath> dp_;
  std::unique_ptr<FakeProxier> feed_;  // hands dp_ tables as deltas
};

// Syncs after the first two apply only the delta (routes, listeners and VIPs of the changed
// ports); re-applying the same table (the periodic resync) rebuilds everything and has the
// VipManager scan the kernel.
TEST_F(DataPathTest, PatchesChangedPortsAndRescansOnPeriodicSync) {
  const int port = testutil::FreePort();
  auto a = Port("a", "127.0.0.2", port, true);
  auto b = Port("b", "127.0.0.3", port, true);
  auto c = Port("c", "127.0.0.4", port, true);
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());
  EXPECT_THAT(dp_->Listeners(), SizeIs(2));
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());
  EXPECT_EQ(vips_.stale_marks(), 2);  // the first two syncs are full

  // b loses its endpoints, c is new: patched.
  ASSERT_TRUE(feed_->Apply(Table({a, Port("b", "127.0.0.3", port, false), c})).ok());
  EXPECT_EQ(vips_.stale_marks(), 2);
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(a->name.ToString(), SizeIs(1)),
                                            Pair(c->name.ToString(), SizeIs(1))));
  EXPECT_EQ(vips_.calls().back(), "Update(+127.0.0.4 -)");  // b's address stays

  // a goes; b's endpoints come back.
  auto last = Table({b, c});
  ASSERT_TRUE(feed_->Apply(last).ok());
  EXPECT_EQ(vips_.stale_marks(), 2);
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(b->name.ToString(), SizeIs(1)),
                                            Pair(c->name.ToString(), SizeIs(1))));
  EXPECT_EQ(vips_.calls().back(), "Update(+ -127.0.0.2)");

  ASSERT_TRUE(feed_->Apply(last).ok());  // periodic
  EXPECT_EQ(vips_.stale_marks(), 3);
  EXPECT_THAT(dp_->Listeners(), SizeIs(2));
}

// A port a delta removes keeps its address while a connection accepted on it is open (removing
// the address would strand it); a later sync after it closed lets the address go.
TEST_F(DataPathTest, RemovedPortKeepsItsVipUntilItsConnectionsClose) {
  auto backend = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.1:0"),
                                            testutil::TcpServer::Mode::kEcho);
  ASSERT_TRUE(backend);
  const int port = testutil::FreePort();
  auto a = std::make_shared<ServicePortInfo>(*Port("a", "127.0.0.24", port, false));
  a->cluster_endpoints = {backend->address()};
  auto b = Port("b", "127.0.0.25", port, true);
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());
  int err = 0;
  auto client =
      testutil::ConnectTcp(*net::SocketAddress::Parse(absl::StrCat("127.0.0.24:", port)), &err);
  ASSERT_TRUE(client) << strerror(err);
  char c = 'x';
  ASSERT_EQ(send(client.get(), &c, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(client.get(), &c, 1, 0), 1);  // accepted and counted by now

  ASSERT_TRUE(feed_->Apply(Table({b})).ok());  // a delta: a is removed
  EXPECT_THAT(feed_->changes(), SizeIs(1));
  EXPECT_TRUE(vips_.Owned().contains(Ip("127.0.0.24")));
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(b->name.ToString(), SizeIs(1))));
  ASSERT_TRUE(feed_->Apply(Table({b})).ok());  // still open: still held
  EXPECT_TRUE(vips_.Owned().contains(Ip("127.0.0.24")));

  client.Reset();
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        EXPECT_TRUE(feed_->Apply(Table({b})).ok());  // deltas without changes
        return !vips_.Owned().contains(Ip("127.0.0.24"));
      },
      absl::Seconds(10)));
  EXPECT_EQ(vips_.calls().back(), "Update(+ -127.0.0.24)");
  EXPECT_TRUE(vips_.Owned().contains(Ip("127.0.0.25")));
}

// Two ports claiming one listener: the first in table order keeps it, also when the first
// arrives in a later, patched sync.
TEST_F(DataPathTest, ConflictingClaimsKeepTheFirstPort) {
  const int port = testutil::FreePort();
  auto a = Port("a", "127.0.0.5", port, true);
  auto b = Port("b", "127.0.0.5", port, true);
  auto other = Port("other", "127.0.0.6", port, true);
  ASSERT_TRUE(feed_->Apply(Table({other})).ok());
  ASSERT_TRUE(feed_->Apply(Table({b, other})).ok());
  ASSERT_TRUE(feed_->Apply(Table({b, Port("other", "127.0.0.6", port, true)})).ok());
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(b->name.ToString(), SizeIs(1)),
                                            Pair(other->name.ToString(), SizeIs(1))));
  ASSERT_TRUE(feed_->Apply(Table({a, b, other})).ok());
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(a->name.ToString(), SizeIs(1)),
                                            Pair(other->name.ToString(), SizeIs(1))));
}

// Apply returns with a removed listener closed in every worker: the next client is refused,
// not queued on a socket whose close is still posted. Without the wait it fails at round 0.
TEST_F(DataPathTest, RemovedListenerRefusesOnceApplyReturns) {
  const int port = testutil::FreePort();
  auto a = Port("a", "127.0.0.7", port, true);
  const auto to = *net::SocketAddress::Parse(absl::StrCat("127.0.0.7:", port));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(feed_->Apply(Table({a})).ok());
    ASSERT_TRUE(feed_->Apply(Table({})).ok());
    int err = 0;
    EXPECT_FALSE(testutil::ConnectTcp(to, &err)) << "round " << i;
    ASSERT_EQ(err, ECONNREFUSED) << "round " << i;
  }
}

// What /debug/services lists is what the workers do: a client that connects as soon as a
// removed listener is gone from Listeners() is refused. Listing it as gone before the workers
// closed it failed this within a few rounds.
TEST_F(DataPathTest, ListenerGoneFromTheListOnlyOnceClosed) {
  const int port = testutil::FreePort();
  auto a = Port("a", "127.0.0.7", port, true);
  const auto to = *net::SocketAddress::Parse(absl::StrCat("127.0.0.7:", port));
  const std::string listed = absl::StrCat("tcp/127.0.0.7:", port);
  auto is_listed = [&] {
    for (const auto& [service, listeners] : dp_->Listeners()) {
      if (absl::c_linear_search(listeners, listed)) {
        return true;
      }
    }
    return false;
  };
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(feed_->Apply(Table({a})).ok());
    ASSERT_TRUE(is_listed());
    std::thread remove([&] { EXPECT_TRUE(feed_->Apply(Table({})).ok()); });
    while (is_listed()) {
    }
    int err = 0;
    EXPECT_FALSE(testutil::ConnectTcp(to, &err)) << "round " << i;
    remove.join();
    ASSERT_EQ(err, ECONNREFUSED) << "round " << i;
  }
}

// A client's connection from `from`: what the backend said before its EOF, or "reset".
std::string Fetch(const net::SocketAddress& to, const char* from) {
  base::UniqueFd fd(socket(to.ip().is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  socklen_t len = net::SocketAddress(Ip(from), 0).ToSockaddr(&ss);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return absl::StrCat("bind: ", strerror(errno));
  }
  len = to.ToSockaddr(&ss);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return absl::StrCat("connect: ", strerror(errno));
  }
  timeval tv{10, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[64];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, n);
    } else if (n == 0) {
      return out;
    } else {
      return errno == ECONNRESET ? "reset" : absl::StrCat("read: ", strerror(errno));
    }
  }
}

// loadBalancerSourceRanges guard the LoadBalancer IP alone, per family, from the next sync on:
// a client outside them is reset before any dial, one inside is served, and the ClusterIP of
// the same port serves everyone.
TEST_F(DataPathTest, SourceRangesGuardTheLoadBalancerIp) {
  auto backend = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.1:0"),
                                            testutil::TcpServer::Mode::kHello, 0, "backend");
  const int port = testutil::FreePort();
  auto lb = [&](std::vector<const char*> ranges) {
    auto info = std::make_shared<ServicePortInfo>();
    info->name = ServicePortName{{"ns", "lb"}, "http", config::Protocol::kTcp};
    info->port = port;
    info->cluster_ips = {Ip("127.0.0.20")};
    info->external_ips = info->load_balancer_ips = {Ip("127.0.0.21")};
    for (const char* r : ranges) {
      info->source_ranges.push_back(*net::Cidr::Parse(r));
    }
    info->cluster_endpoints = info->external_endpoints = {backend->address()};
    return info;
  };
  const net::SocketAddress lb_ip(Ip("127.0.0.21"), port), cluster_ip(Ip("127.0.0.20"), port);
  base::Counter& refused = metrics_.source_range_refused.WithLabels({"ns/lb:http"});

  ASSERT_TRUE(feed_->Apply(Table({lb({"127.0.0.30/32", "2001:db8::/32"})})).ok());
  EXPECT_EQ(Fetch(lb_ip, "127.0.0.31"), "reset");
  EXPECT_EQ(refused.Value(), 1);
  EXPECT_EQ(Fetch(lb_ip, "127.0.0.30"), "backend");
  EXPECT_EQ(Fetch(cluster_ip, "127.0.0.31"), "backend");
  EXPECT_EQ(backend->accepted(), 2);  // the refused client never reached a dial

  ASSERT_TRUE(feed_->Apply(Table({lb({"127.0.0.0/8"})})).ok());
  EXPECT_EQ(Fetch(lb_ip, "127.0.0.31"), "backend");
  // Only IPv6 ranges: kube-proxy's IPv4 proxier sees none, so the IPv4 address is open.
  ASSERT_TRUE(feed_->Apply(Table({lb({"2001:db8::/32"})})).ok());
  EXPECT_EQ(Fetch(lb_ip, "127.0.0.31"), "backend");
  EXPECT_EQ(refused.Value(), 1);
}

// A port no path can serve (SCTP) is listed with its reason and counted once, across full
// resyncs, until it goes.
TEST_F(DataPathTest, SctpPortsAreReportedUnserved) {
  const int port = testutil::FreePort();
  auto tcp = Port("a", "127.0.0.22", port, true);
  auto sctp = std::make_shared<ServicePortInfo>(*Port("s", "127.0.0.23", port, true));
  sctp->name.protocol = config::Protocol::kSctp;
  base::Gauge& gauge = metrics_.unserved_ports.WithLabels({"sctp"});
  auto both = Table({tcp, sctp});
  for (int i = 0; i < 3; ++i) {  // the first two syncs and a periodic resync are full
    ASSERT_TRUE(feed_->Apply(both).ok());
    EXPECT_THAT(dp_->Unserved(), ElementsAre(Pair("ns/s:http", HasSubstr("SCTP"))));
    EXPECT_EQ(gauge.Value(), 1);
  }
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair("ns/a:http", SizeIs(1))));
  ASSERT_TRUE(feed_->Apply(Table({tcp})).ok());  // patched
  EXPECT_THAT(dp_->Unserved(), ElementsAre());
  EXPECT_EQ(gauge.Value(), 0);
  ASSERT_TRUE(feed_->Apply(both).ok());
  EXPECT_THAT(dp_->Unserved(), SizeIs(1));
  EXPECT_EQ(gauge.Value(), 1);
}

// A listener that cannot open (its address is taken) is reported and retried at every sync;
// the others open and the sync succeeds.
TEST_F(DataPathTest, FailedListenerIsReportedAndRetriedWhileTheOthersServe) {
  const int port = testutil::FreePort();
  auto blocker = testutil::ListenTcp(*net::SocketAddress::Parse(absl::StrCat("127.0.0.8:", port)));
  ASSERT_TRUE(blocker);
  auto a = Port("a", "127.0.0.8", port, true);
  auto b = Port("b", "127.0.0.9", port, true);
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());
  EXPECT_THAT(dp_->Listeners(), ElementsAre(Pair(b->name.ToString(), SizeIs(1))));
  auto skipped = dp_->Unserved();
  ASSERT_THAT(skipped, SizeIs(1));
  EXPECT_THAT(skipped.begin()->second, ::testing::HasSubstr("tcp/127.0.0.8"));
  EXPECT_EQ(metrics_.listener_failures.Value(), 1);
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());  // the second sync is full too
  EXPECT_EQ(metrics_.listener_failures.Value(), 2);
  blocker.Reset();
  ASSERT_TRUE(feed_->Apply(Table({a, b})).ok());  // a delta without changes retries it
  EXPECT_TRUE(feed_->changes().empty());
  EXPECT_THAT(dp_->Listeners(), SizeIs(2));
  EXPECT_THAT(dp_->Unserved(), SizeIs(0));
}

// A Service over --max-listeners-per-service is skipped whole; the rest of the table serves.
TEST_F(DataPathTest, ServiceOverItsListenerCapIsSkippedAndReported) {
  DataPath::Options options;
  options.caps.max_listeners_per_service = 2;
  auto dp = DataPath::Create(options, vips_, metrics_);
  ASSERT_TRUE(dp.ok()) << dp.status();
  FakeProxier feed(**dp);
  const int port = testutil::FreePort();
  std::vector<ServicePortInfoPtr> ports = {Port("small", "127.0.0.10", port, true)};
  for (int i = 0; i < 3; ++i) {
    auto big = std::make_shared<ServicePortInfo>(*Port("big", "127.0.0.11", port + i, true));
    big->name.port = absl::StrCat("p", i);
    ports.push_back(big);
  }
  ASSERT_TRUE(feed.Apply(Table(ports)).ok());
  EXPECT_THAT((*dp)->Listeners(), ElementsAre(Pair("ns/small:http", SizeIs(1))));
  EXPECT_THAT((*dp)->Unserved(), SizeIs(3));
  EXPECT_THAT((*dp)->Unserved()["ns/big:p0"], ::testing::HasSubstr("--max-listeners-per-service"));
  EXPECT_EQ(metrics_.unserved_ports.WithLabels({"service_cap"}).Value(), 3);
  // Endpoint changes move no listener, so no admission: patched, not rebuilt (a rebuild
  // reconciles every address; this patch changes none), whether the Service is skipped or
  // served.
  ASSERT_TRUE(feed.Apply(Table(ports)).ok());  // the second sync is full too
  auto moved = [](const ServicePortInfoPtr& p) {
    auto next = std::make_shared<ServicePortInfo>(*p);
    next->cluster_endpoints = {*net::SocketAddress::Parse("10.0.0.2:8080")};
    return next;
  };
  for (size_t i : {size_t{1}, size_t{0}}) {
    ports[i] = moved(ports[i]);
    const size_t calls = vips_.calls().size();
    ASSERT_TRUE(feed.Apply(Table(ports)).ok());
    EXPECT_EQ(vips_.calls().size(), calls) << i << ": " << vips_.calls().back();
  }
  EXPECT_THAT((*dp)->Listeners(), ElementsAre(Pair("ns/small:http", SizeIs(1))));
  EXPECT_THAT((*dp)->Unserved(), SizeIs(3));
  ports.pop_back();  // two ports fit: served once the Service shrinks
  ASSERT_TRUE(feed.Apply(Table(ports)).ok());
  EXPECT_THAT((*dp)->Listeners(), SizeIs(3));
  EXPECT_THAT((*dp)->Unserved(), SizeIs(0));
}

// Past the reuseport budget a TCP address is one socket that every worker watches
// (EPOLLEXCLUSIVE), a UDP address one socket on one worker: with two workers, each listener
// still costs one descriptor, and every client is served.
TEST_F(DataPathTest, SharedListenersCostOneSocketEachAndServe) {
  DataPath::Options options;
  options.workers = 2;
  options.reuseport_sockets = 0;
  auto dp = DataPath::Create(options, vips_, metrics_);
  ASSERT_TRUE(dp.ok()) << dp.status();
  FakeProxier feed(**dp);
  auto backend = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.12:0"),
                                            testutil::TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(backend);
  const int port = testutil::FreePort();
  auto tcp = std::make_shared<ServicePortInfo>(*Port("web", "127.0.0.13", port, false));
  tcp->cluster_endpoints = {backend->address()};
  auto udp = std::make_shared<ServicePortInfo>(*tcp);
  udp->name.protocol = config::Protocol::kUdp;
  ASSERT_TRUE(feed.Apply(Table({tcp, udp})).ok());
  EXPECT_EQ(metrics_.listeners.Value(), 2);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(testutil::Hello(absl::StrCat("127.0.0.13:", port)), "b") << i;
  }
  ASSERT_TRUE(feed.Apply(Table({})).ok());
  EXPECT_EQ(metrics_.listeners.Value(), 0);
}

}  // namespace
}  // namespace sluice::proxier
