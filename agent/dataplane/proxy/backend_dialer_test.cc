// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/backend_dialer.h"

#include <sys/socket.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "lib/net/socket.h"

// Real loopback endpoints on port 0: one that listens, one whose port is bound but not
// listening (the kernel refuses), one whose accept queue is full (SYNs are dropped, so the
// connect hangs). Timing is asserted only as an order of events, never as a duration.
namespace sluice::proxy {
namespace {

const net::IpAddress kClient = *net::IpAddress::Parse("10.1.2.3");

base::UniqueFd Bound(bool listen, int backlog = 16) {
  const net::SocketAddress any = *net::SocketAddress::Parse("127.0.0.1:0");
  if (listen) {
    return std::move(*net::ListenTcp(any, false, backlog));
  }
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  socklen_t len = any.ToSockaddr(&ss);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  return fd;
}

net::SocketAddress AddressOf(const base::UniqueFd& fd) { return *net::LocalAddress(fd.get()); }

// A Balancer whose round-robin tries `endpoints` in this order.
std::shared_ptr<Balancer> InOrder(const std::vector<net::SocketAddress>& endpoints) {
  for (uint64_t seed = 0;; ++seed) {
    auto b = std::make_shared<Balancer>(endpoints, Balancer::Affinity{}, seed);
    if (b->endpoints() == endpoints) {
      return b;
    }
  }
}

class BackendDialerTest : public ::testing::Test, public BackendDialerCallbacks {
 protected:
  void SetUp() override {
    loop_ = std::move(*event::EventLoop::Create());
    watchdog_ = loop_->CreateTimer([this] {
      ADD_FAILURE() << "watchdog fired";
      loop_->Stop();
    });
    watchdog_->Arm(absl::Seconds(30));
  }

  void Dial(std::shared_ptr<Balancer> balancer, absl::Duration budget) {
    dialer_ = std::make_unique<BackendDialer>(*loop_, std::move(balancer), kClient, budget, *this);
    dialer_->Start();
    if (!done_) {
      loop_->Run();
    }
    EXPECT_TRUE(done_);
  }

  // BackendDialerCallbacks
  void OnDialAttemptFailed(DialFailure reason) override {
    EXPECT_FALSE(done_);
    failures_.push_back(reason);
  }
  void OnDialed(BackendDialer& dialer, base::UniqueFd backend) override {
    EXPECT_EQ(&dialer, dialer_.get());
    EXPECT_FALSE(done_);
    done_ = true;
    backend_ = std::move(backend);
    loop_->Stop();
  }
  void OnDialGaveUp(BackendDialer& dialer) override {
    EXPECT_EQ(&dialer, dialer_.get());
    EXPECT_FALSE(done_);
    done_ = gave_up_ = true;
    loop_->Stop();
  }

  std::unique_ptr<event::EventLoop> loop_;
  std::unique_ptr<event::Timer> watchdog_;
  std::unique_ptr<BackendDialer> dialer_;
  std::vector<DialFailure> failures_;
  base::UniqueFd backend_;
  bool done_ = false;
  bool gave_up_ = false;
};

TEST_F(BackendDialerTest, ConnectsToAListeningEndpoint) {
  base::UniqueFd server = Bound(/*listen=*/true);
  Dial(InOrder({AddressOf(server)}), absl::Seconds(5));
  ASSERT_TRUE(backend_.valid());
  EXPECT_FALSE(gave_up_);
  EXPECT_TRUE(failures_.empty());
  EXPECT_EQ(dialer_->endpoint(), AddressOf(server));
  EXPECT_EQ(net::SocketError(backend_.get()), 0);
}

TEST_F(BackendDialerTest, RefusedEndpointIsSkippedForTheNext) {
  base::UniqueFd closed = Bound(/*listen=*/false);
  base::UniqueFd server = Bound(/*listen=*/true);
  Dial(InOrder({AddressOf(closed), AddressOf(server)}), absl::Seconds(5));
  ASSERT_TRUE(backend_.valid());
  EXPECT_EQ(failures_, std::vector<DialFailure>{DialFailure::kRefused});
  EXPECT_EQ(dialer_->endpoint(), AddressOf(server));
}

TEST_F(BackendDialerTest, EndpointThatNeverAnswersTimesOutAndTheNextIsTried) {
  // Backlog 0 holds one connection nobody accepts; the kernel then drops further SYNs.
  base::UniqueFd full = Bound(/*listen=*/true, /*backlog=*/0);
  auto filler = net::DialTcp(AddressOf(full));
  ASSERT_TRUE(filler.ok()) << filler.status();
  base::UniqueFd server = Bound(/*listen=*/true);
  // The filler's handshake completes before the dial starts: wait for it on the loop.
  std::unique_ptr<event::FileEvent> connected =
      std::move(*loop_->Watch(filler->get(), EPOLLOUT, [this](uint32_t) { loop_->Stop(); }));
  loop_->Run();
  connected.reset();
  Dial(InOrder({AddressOf(full), AddressOf(server)}), absl::Seconds(20));
  ASSERT_TRUE(backend_.valid());
  EXPECT_EQ(failures_, std::vector<DialFailure>{DialFailure::kTimeout});
  EXPECT_EQ(dialer_->endpoint(), AddressOf(server));
}

TEST_F(BackendDialerTest, EveryEndpointRefusingRetriesAfterABackoffUntilTheBudgetIsSpent) {
  base::UniqueFd closed = Bound(/*listen=*/false);
  // Backoffs of 250, 500 and 1000 ms: two rounds fit in the budget even on a busy machine, the
  // fourth does not.
  Dial(InOrder({AddressOf(closed)}), absl::Milliseconds(1200));
  EXPECT_TRUE(gave_up_);
  EXPECT_FALSE(backend_.valid());
  ASSERT_GE(failures_.size(), 2u);  // the first round, and at least one after the backoff
  for (DialFailure f : failures_) {
    EXPECT_EQ(f, DialFailure::kRefused);
  }
}

TEST_F(BackendDialerTest, NoEndpointGivesUpWithinStart) {
  dialer_ = std::make_unique<BackendDialer>(*loop_, InOrder({}), kClient, absl::Seconds(5), *this);
  dialer_->Start();
  EXPECT_TRUE(gave_up_);
  EXPECT_EQ(failures_, std::vector<DialFailure>{DialFailure::kNoEndpoint});
}

TEST_F(BackendDialerTest, FailedDialResetsTheClientsAffinity) {
  base::UniqueFd closed = Bound(/*listen=*/false);
  base::UniqueFd server = Bound(/*listen=*/true);
  auto table = std::make_shared<AffinityTable>();
  const absl::Duration timeout = absl::Hours(1);
  // The client is stuck to the refusing endpoint; the retry must not be.
  ASSERT_TRUE(table->Remember(kClient, AddressOf(closed), loop_->MonotonicNow(), timeout));
  auto balancer = std::make_shared<Balancer>(
      std::vector<net::SocketAddress>{AddressOf(closed), AddressOf(server)},
      Balancer::Affinity{.table = table, .timeout = timeout}, 1);
  Dial(balancer, absl::Seconds(5));
  ASSERT_TRUE(backend_.valid());
  EXPECT_EQ(failures_, std::vector<DialFailure>{DialFailure::kRefused});
  EXPECT_EQ(table->Lookup(kClient, loop_->MonotonicNow(), timeout), AddressOf(server));
}

}  // namespace
}  // namespace sluice::proxy
