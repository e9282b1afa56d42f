// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_proxy.h"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <future>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/net/socket.h"

#include "agent/dataplane/proxy/test_sockets.h"
#include "agent/dataplane/proxy/worker.h"

// Real loopback UDP sockets and a real EventLoop on a helper thread; the test thread plays
// client and backend with blocking sockets and inspects the proxy through Post.
namespace sluice::proxy {
namespace {

using testing::RandomBytes;

net::SocketAddress Addr(const char* text) { return *net::SocketAddress::Parse(text); }

base::UniqueFd UdpSocket(const char* bind_to = "127.0.0.1:0") {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  socklen_t len = Addr(bind_to).ToSockaddr(&ss);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  return fd;
}

net::SocketAddress Local(int fd) { return *net::LocalAddress(fd); }

void SendTo(int fd, const std::string& data, const net::SocketAddress& to) {
  sockaddr_storage ss;
  socklen_t len = to.ToSockaddr(&ss);
  EXPECT_EQ(sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&ss), len),
            static_cast<ssize_t>(data.size()));
}

// One datagram and its source, or nullopt after `timeout`.
std::optional<std::string> RecvFrom(int fd, net::SocketAddress* from, int timeout_ms = 10000) {
  pollfd p{.fd = fd, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) != 1) {
    return std::nullopt;
  }
  std::string buf(65536, '\0');
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  ssize_t n = recvfrom(fd, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&ss), &len);
  if (n < 0) {
    return std::nullopt;
  }
  *from = *net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len);
  buf.resize(static_cast<size_t>(n));
  return buf;
}

std::shared_ptr<Balancer> MakeBalancer(std::vector<net::SocketAddress> endpoints) {
  return std::make_shared<Balancer>(std::move(endpoints), Balancer::Affinity{}, 1);
}

// Polls `pred` until it holds or 10 s pass.
bool WaitUntil(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class UdpProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = std::move(*event::EventLoop::Create());
    thread_ = std::thread([this] { loop_->Run(); });
  }
  void TearDown() override {
    loop_->Stop();
    thread_.join();
    proxy_.reset();  // the loop no longer runs: safe from this thread
  }

  // Runs fn on the loop thread and returns its result.
  template <typename F>
  auto OnLoop(F fn) -> decltype(fn()) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    loop_->Post([&task] { task(); });
    return result.get();
  }

  void StartProxy(std::shared_ptr<Balancer> balancer, UdpOptions options = {},
                  const char* bind_to = "127.0.0.1:0") {
    auto fd = net::BindUdp(Addr(bind_to), /*reuseport=*/false);
    ASSERT_TRUE(fd.ok()) << fd.status();
    table_ = std::make_unique<UdpFlowTable>(options.max_flows, options.max_flows_per_source,
                                            /*fds=*/nullptr);
    OnLoop([&] {
      auto proxy = UdpProxy::Create(*loop_, arena_, *table_, std::move(*fd), std::move(balancer),
                                    options, metrics_);
      ASSERT_TRUE(proxy.ok()) << proxy.status();
      proxy_ = std::move(*proxy);
    });
    ASSERT_NE(proxy_, nullptr);
    service_ = proxy_->local_address();
  }

  size_t Flows() {
    return OnLoop([this] { return proxy_->flows(); });
  }
  double Dropped(const char* reason) { return metrics_.udp_dropped.WithLabels({reason}).Value(); }

  // Sends `payloads` from `from` to `to` while the loop is held, so that the proxy reads them
  // in one batch, then checks that `at` receives each alone, in order, from `expect_from`.
  void SendHeldBatch(int from, const net::SocketAddress& to, int at,
                     const std::vector<std::string>& payloads,
                     const std::optional<net::SocketAddress>& expect_from) {
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    loop_->Post([released] { released.wait(); });
    for (const std::string& p : payloads) {
      SendTo(from, p, to);
    }
    release.set_value();
    for (size_t i = 0; i < payloads.size(); ++i) {
      net::SocketAddress source;
      auto got = RecvFrom(at, &source);
      ASSERT_TRUE(got) << "datagram " << i << " missing";
      EXPECT_EQ(got->size(), payloads[i].size()) << "datagram " << i;
      EXPECT_EQ(*got, payloads[i]) << "datagram " << i;
      if (expect_from) {
        EXPECT_EQ(source, *expect_from);
      }
    }
  }

  // Runs of equal-size datagrams (GSO material when `options.gso`), a short end, mixed sizes
  // and an empty datagram, in both directions of one flow.
  void CheckRunsKeepTheirBoundaries(const UdpOptions& options) {
    base::UniqueFd backend = UdpSocket();
    base::UniqueFd client = UdpSocket();
    StartProxy(MakeBalancer({Local(backend.get())}), options);
    const net::SocketAddress flow = Echo(client.get(), backend.get(), "open");
    std::vector<std::string> payloads;
    const size_t sizes[] = {64, 64, 64, 64, 64, 20, 64, 64, 1000, 1000, 1000, 3, 0, 7, 7};
    for (size_t i = 0; i < std::size(sizes); ++i) {
      payloads.push_back(RandomBytes(sizes[i], i + 1));
    }
    SendHeldBatch(client.get(), service_, backend.get(), payloads, flow);
    SendHeldBatch(backend.get(), flow, client.get(), payloads, service_);
    const double n = 1 + static_cast<double>(payloads.size());
    EXPECT_TRUE(WaitUntil([&] {
      return metrics_.udp_datagrams_to_backend.Value() == n &&
             metrics_.udp_datagrams_to_client.Value() == n;
    }));
    EXPECT_EQ(Dropped("send_failed"), 0);
    EXPECT_EQ(Flows(), 1u);
  }

  // Client -> proxy -> backend -> proxy -> client, checking both hops. Returns the flow's
  // source address as the backend saw it.
  net::SocketAddress Echo(int client, int backend, const std::string& payload) {
    SendTo(client, payload, service_);
    net::SocketAddress flow_addr, from;
    auto got = RecvFrom(backend, &flow_addr);
    EXPECT_EQ(got, payload);
    SendTo(backend, "re:" + payload, flow_addr);
    EXPECT_EQ(RecvFrom(client, &from), "re:" + payload);
    EXPECT_EQ(from, service_) << "replies must leave from the service address";
    return flow_addr;
  }

  std::unique_ptr<event::EventLoop> loop_;
  std::thread thread_;
  DatagramArena arena_;
  base::Registry registry_;
  DataPathMetrics metrics_{registry_};
  std::unique_ptr<UdpFlowTable> table_;  // before proxy_: it outlives the proxy
  std::unique_ptr<UdpProxy> proxy_;
  net::SocketAddress service_;
};

TEST_F(UdpProxyTest, EchoesSmallLargeAndMaximalDatagrams) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}));
  std::optional<net::SocketAddress> flow;
  for (size_t size : {size_t{1}, size_t{2000}, size_t{65000}}) {
    net::SocketAddress seen = Echo(client.get(), backend.get(), RandomBytes(size, size));
    EXPECT_NE(seen, Local(client.get())) << "the backend sees the proxy's flow socket";
    EXPECT_EQ(flow.value_or(seen), seen) << "one client, one flow";
    flow = seen;
  }
  EXPECT_EQ(Flows(), 1u);
  EXPECT_EQ(metrics_.udp_flows.Value(), 1);
  EXPECT_EQ(metrics_.udp_flows_total.Value(), 1);
  EXPECT_EQ(metrics_.udp_datagrams_to_backend.Value(), 3);
  EXPECT_EQ(metrics_.udp_datagrams_to_client.Value(), 3);
}

TEST_F(UdpProxyTest, TwoClientsGetTwoFlows) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd a = UdpSocket();
  base::UniqueFd b = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}));
  net::SocketAddress flow_a = Echo(a.get(), backend.get(), "from a");
  net::SocketAddress flow_b = Echo(b.get(), backend.get(), "from b");
  EXPECT_NE(flow_a, flow_b);
  EXPECT_EQ(Echo(a.get(), backend.get(), "a again"), flow_a);
  EXPECT_EQ(Flows(), 2u);
  EXPECT_EQ(metrics_.udp_flows_total.Value(), 2);
}

TEST_F(UdpProxyTest, InterleavedClientsInOneBatchKeepTheirFlowsAndOrder) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd a = UdpSocket();
  base::UniqueFd b = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}));
  const net::SocketAddress flow_a = Echo(a.get(), backend.get(), "a0");
  const net::SocketAddress flow_b = Echo(b.get(), backend.get(), "b0");
  // Hold the loop so that everything below arrives in one recvmmsg batch, as runs a a b a b b.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  loop_->Post([released] { released.wait(); });
  const std::vector<std::pair<int, std::string>> sends = {{a.get(), "a1"}, {a.get(), "a2"},
                                                          {b.get(), "b1"}, {a.get(), "a3"},
                                                          {b.get(), "b2"}, {b.get(), "b3"}};
  for (const auto& [fd, payload] : sends) {
    SendTo(fd, payload, service_);
  }
  release.set_value();
  std::vector<std::string> from_a, from_b;
  for (size_t i = 0; i < sends.size(); ++i) {
    net::SocketAddress from;
    auto got = RecvFrom(backend.get(), &from);
    ASSERT_TRUE(got);
    (from == flow_a ? from_a : from_b).push_back(*got);
    EXPECT_TRUE(from == flow_a || from == flow_b) << from.ToString();
  }
  EXPECT_EQ(from_a, (std::vector<std::string>{"a1", "a2", "a3"}));
  EXPECT_EQ(from_b, (std::vector<std::string>{"b1", "b2", "b3"}));
  // Counted after sendmmsg returns, which may be after the backend already has them.
  EXPECT_TRUE(WaitUntil([&] { return metrics_.udp_datagrams_to_backend.Value() == 8; }));
  EXPECT_EQ(Flows(), 2u);
}

TEST_F(UdpProxyTest, SegmentedRunsKeepTheirBoundaries) {
  CheckRunsKeepTheirBoundaries(UdpOptions{.gso = true});
}

TEST_F(UdpProxyTest, UnsegmentedRunsKeepTheirBoundaries) {
  CheckRunsKeepTheirBoundaries(UdpOptions{.gso = false});
}

TEST_F(UdpProxyTest, IdleFlowIsClosed) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}),
             UdpOptions{.idle_timeout = absl::Milliseconds(100)});
  const auto sent = std::chrono::steady_clock::now();
  net::SocketAddress first = Echo(client.get(), backend.get(), "ping");
  ASSERT_TRUE(WaitUntil([&] { return Flows() == 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - sent, std::chrono::milliseconds(100));
  EXPECT_EQ(metrics_.udp_flows.Value(), 0);
  // The client's next datagram opens a new flow (a new backend-side port).
  EXPECT_NE(Echo(client.get(), backend.get(), "ping"), first);
  EXPECT_EQ(metrics_.udp_flows_total.Value(), 2);
}

TEST_F(UdpProxyTest, ActivityKeepsFlowOpen) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}),
             UdpOptions{.idle_timeout = absl::Milliseconds(400)});
  // Sleeps are the point here: datagrams every 50 ms for 2.5 idle timeouts. Each refreshes
  // last_active, so the lazily armed timer re-arms instead of closing the flow. A loaded
  // machine can stall this thread past the idle timeout, which rightly closes the flow: a gap
  // that long (from one datagram's send to the next one's answer, which bounds the gap the
  // proxy saw) starts the stretch over, and only the flows opened within a stretch count.
  using Clock = std::chrono::steady_clock;
  constexpr auto kIdle = std::chrono::milliseconds(400);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  auto stretch_start = Clock::now(), last_sent = Clock::time_point::min();
  double flows_before = 0;
  bool stretch_done = false;
  while (!stretch_done && Clock::now() < deadline) {
    const auto sent = Clock::now();
    Echo(client.get(), backend.get(), "keepalive");
    const auto answered = Clock::now();
    if (last_sent == Clock::time_point::min() || answered - last_sent >= kIdle) {
      stretch_start = sent;
      flows_before = metrics_.udp_flows_total.Value();  // this datagram may have opened one
    } else {
      EXPECT_EQ(metrics_.udp_flows_total.Value(), flows_before) << "closed while active";
      stretch_done = answered - stretch_start >= 5 * kIdle / 2;
    }
    last_sent = sent;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(stretch_done) << "no 1 s stretch without a stall past the idle timeout in 30 s";
}

TEST_F(UdpProxyTest, FullTableEvictsTheLeastRecentlyUsedFlow) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd a = UdpSocket();
  base::UniqueFd b = UdpSocket();
  base::UniqueFd c = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}), UdpOptions{.max_flows = 2});
  Echo(a.get(), backend.get(), "a");
  Echo(b.get(), backend.get(), "b");
  Echo(a.get(), backend.get(), "a again: b is now the least recently used");
  Echo(c.get(), backend.get(), "c is admitted");  // b's flow makes room
  EXPECT_EQ(Flows(), 2u);
  EXPECT_EQ(metrics_.udp_flows_evicted.Value(), 1);
  EXPECT_EQ(Dropped("flow_limit"), 0);
  Echo(a.get(), backend.get(), "a kept its flow");
  EXPECT_EQ(metrics_.udp_flows_total.Value(), 3);
}

// A client IP at its cap gives up its own least recently used flow for a new one; another
// client's flow is untouched.
TEST_F(UdpProxyTest, SourceLimitRecyclesTheClientsOwnOldestFlow) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd a = UdpSocket("127.0.0.1:0");
  base::UniqueFd b = UdpSocket("127.0.0.1:0");
  base::UniqueFd c = UdpSocket("127.0.0.1:0");
  base::UniqueFd other = UdpSocket("127.0.0.3:0");
  StartProxy(MakeBalancer({Local(backend.get())}),
             UdpOptions{.max_flows = 16, .max_flows_per_source = 2});
  const net::SocketAddress other_flow = Echo(other.get(), backend.get(), "other");
  Echo(a.get(), backend.get(), "a");
  Echo(b.get(), backend.get(), "b");
  Echo(c.get(), backend.get(), "c: a third flow of 127.0.0.1");
  EXPECT_EQ(metrics_.udp_flows_evicted.Value(), 1);
  EXPECT_EQ(Flows(), 3u);
  EXPECT_EQ(Echo(other.get(), backend.get(), "other kept its flow"), other_flow);
  Echo(b.get(), backend.get(), "b kept its flow");
  EXPECT_EQ(Dropped("flow_limit"), 0);
}

TEST_F(UdpProxyTest, RouteUpdateDropsFlowsToRemovedEndpoints) {
  base::UniqueFd old_backend = UdpSocket();
  base::UniqueFd new_backend = UdpSocket();
  base::UniqueFd other = UdpSocket();
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({Local(old_backend.get())}));
  Echo(client.get(), old_backend.get(), "one");
  // A new balancer that still has the flow's endpoint keeps the flow.
  OnLoop([&] {
    proxy_->SetBalancer(MakeBalancer({Local(old_backend.get()), Local(other.get())}));
  });
  EXPECT_EQ(Flows(), 1u);
  Echo(client.get(), old_backend.get(), "two");
  OnLoop([&] { proxy_->SetBalancer(MakeBalancer({Local(new_backend.get())})); });
  EXPECT_EQ(Flows(), 0u);
  EXPECT_EQ(metrics_.udp_flows.Value(), 0);
  Echo(client.get(), new_backend.get(), "three");
  OnLoop([&] { proxy_->SetBalancer(nullptr); });
  EXPECT_EQ(Flows(), 0u);
  SendTo(client.get(), "nowhere", service_);
  ASSERT_TRUE(WaitUntil([&] { return Dropped("no_endpoint") == 1; }));
}

TEST_F(UdpProxyTest, RefusedBackendDropsFlow) {
  net::SocketAddress dead;
  {
    base::UniqueFd gone = UdpSocket();
    dead = Local(gone.get());
  }  // closed: the port now answers ICMP port unreachable
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({dead}));
  SendTo(client.get(), "hello?", service_);
  ASSERT_TRUE(WaitUntil([&] { return Dropped("backend_refused") == 1; }));
  EXPECT_EQ(Flows(), 0u);
  // The next datagram picks again: a new flow, refused again.
  SendTo(client.get(), "hello?", service_);
  ASSERT_TRUE(WaitUntil([&] { return Dropped("backend_refused") == 2; }));
  EXPECT_EQ(metrics_.udp_flows_total.Value(), 2);
  EXPECT_EQ(metrics_.udp_flows.Value(), 0);
}

TEST_F(UdpProxyTest, WildcardListenerRepliesFromTheAddressTheClientUsed) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd client = UdpSocket();
  StartProxy(MakeBalancer({Local(backend.get())}), {}, "0.0.0.0:0");
  // 127.0.0.2 is local (127/8 on lo); without IP_PKTINFO the reply would come from 127.0.0.1.
  service_ = net::SocketAddress(*net::IpAddress::Parse("127.0.0.2"), service_.port());
  Echo(client.get(), backend.get(), "via 127.0.0.2");
}

TEST(UdpWorkerTest, ProxiesThroughAWorker) {
  base::Registry registry;
  DataPathMetrics metrics(registry);
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd client = UdpSocket();
  auto fd = net::BindUdp(Addr("127.0.0.1:0"), /*reuseport=*/true);
  ASSERT_TRUE(fd.ok()) << fd.status();
  const ListenKey key{Local(fd->get()), Transport::kUdp};
  auto worker = Worker::Create(0, Worker::Options{}, metrics);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto routes = std::make_shared<RouteTable>();
  routes->insert_or_assign(key, Route{"ns/svc:dns", MakeBalancer({Local(backend.get())})});
  (*worker)->SetRoutes(routes);
  (*worker)->AddUdpListener(key, std::move(*fd));

  SendTo(client.get(), RandomBytes(2000, 7), key.address);
  net::SocketAddress flow_addr, from;
  ASSERT_EQ(RecvFrom(backend.get(), &flow_addr), RandomBytes(2000, 7));
  SendTo(backend.get(), "answer", flow_addr);
  EXPECT_EQ(RecvFrom(client.get(), &from), "answer");
  EXPECT_EQ(from, key.address);
  EXPECT_EQ(metrics.udp_flows.Value(), 1);

  // The endpoint leaves the route: the flow closes with the next SetRoutes.
  auto moved = std::make_shared<RouteTable>();
  moved->insert_or_assign(key, Route{"ns/svc:dns", MakeBalancer({Addr("127.0.0.1:9")})});
  (*worker)->SetRoutes(moved);
  ASSERT_TRUE(WaitUntil([&] { return metrics.udp_flows.Value() == 0; }));

  (*worker)->SetRoutes(routes);
  ASSERT_TRUE((*worker)->Flush(absl::Seconds(10)));  // else the datagram may beat the routes
  SendTo(client.get(), "again", key.address);
  ASSERT_EQ(RecvFrom(backend.get(), &flow_addr), "again");
  ASSERT_TRUE(WaitUntil([&] { return metrics.udp_flows.Value() == 1; }));
  (*worker)->RemoveListener(key);
  ASSERT_TRUE(WaitUntil([&] { return metrics.udp_flows.Value() == 0; }));
  worker->reset();
  EXPECT_EQ(metrics.udp_flows_total.Value(), 2);
}

// Source ranges: a new client outside them is dropped before any endpoint is picked (counted),
// one inside is served, and narrowing them closes the flows of clients now outside.
TEST_F(UdpProxyTest, SourceFilterAdmitsNewClientsAndClosesExcludedFlows) {
  base::UniqueFd backend = UdpSocket();
  base::UniqueFd inside = UdpSocket("127.0.0.40:0");
  base::UniqueFd outside = UdpSocket("127.0.0.41:0");
  StartProxy(MakeBalancer({Local(backend.get())}));
  base::Counter& refused = metrics_.source_range_refused.WithLabels({"ns/dns:udp"});
  auto filter = [&](const char* cidr) {
    return std::make_shared<SourceFilter>(std::vector<net::Cidr>{*net::Cidr::Parse(cidr)}, refused);
  };
  OnLoop([&] { proxy_->SetSources(filter("127.0.0.40/32")); });
  SendTo(outside.get(), "refused", service_);
  Echo(inside.get(), backend.get(), "served");
  EXPECT_EQ(Dropped("source_range"), 1);
  EXPECT_EQ(refused.Value(), 1);
  EXPECT_EQ(Flows(), 1u);

  OnLoop([&] { proxy_->SetSources(filter("127.0.0.41/32")); });
  EXPECT_EQ(Flows(), 0u);
  Echo(outside.get(), backend.get(), "now served");
  OnLoop([&] { proxy_->SetSources(nullptr); });
  Echo(inside.get(), backend.get(), "open to all");
  EXPECT_EQ(Flows(), 2u);
}

}  // namespace
}  // namespace sluice::proxy
