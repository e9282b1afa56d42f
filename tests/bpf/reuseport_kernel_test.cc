// SPDX-License-Identifier: Apache-2.0
// The reuseport program on a real kernel: per-worker SO_REUSEPORT listeners of one group, new
// connections counted per listener. Needs root (CAP_BPF); runs in its own network namespace.
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"
#include "lib/net/socket.h"

#include "agent/dataplane/fastpath/reuseport_balancer.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::fastpath {
namespace {

class ReuseportKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (CAP_BPF, network namespaces)";
    }
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    netns_ = std::move(*ns);
  }

  // `n` listeners of one group on 127.0.0.1, joined in order.
  static std::vector<base::UniqueFd> Listeners(int n) {
    std::vector<base::UniqueFd> fds;
    net::SocketAddress at = *net::SocketAddress::Parse("127.0.0.1:0");
    for (int i = 0; i < n; ++i) {
      auto fd = net::ListenTcp(at, /*reuseport=*/true, 64);
      EXPECT_TRUE(fd.ok()) << fd.status();
      at = *net::LocalAddress(fd->get());  // the others join on the first one's port
      fds.push_back(std::move(*fd));
    }
    return fds;
  }

  // Connects `n` clients one after another and returns how many each listener queued.
  static std::vector<int> Spread(const std::vector<base::UniqueFd>& listeners, int n) {
    const net::SocketAddress at = *net::LocalAddress(listeners[0].get());
    std::vector<base::UniqueFd> clients;
    for (int i = 0; i < n; ++i) {
      int err = 0;
      clients.push_back(testutil::ConnectTcp(at, &err));
      EXPECT_TRUE(clients.back()) << strerror(err);
    }
    std::vector<int> accepted;
    for (const auto& l : listeners) {
      int count = 0;
      while (base::UniqueFd(accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK))) {
        ++count;
      }
      accepted.push_back(count);
    }
    return accepted;
  }

  std::unique_ptr<testutil::NetNs> netns_;
};

TEST_F(ReuseportKernelTest, ConnectionsGoToTheWorkersInTurn) {
  auto balancer = ReuseportBalancer::Create(3);
  ASSERT_TRUE(balancer.ok()) << balancer.status();
  std::vector<base::UniqueFd> listeners = Listeners(3);
  ASSERT_TRUE((*balancer)->Attach(listeners[0].get()).ok());
  // Whatever the counter's start (the turn is shared by every group), 9 connections in a row
  // are exactly 3 per worker. The kernel's hash would give that only by chance.
  EXPECT_EQ(Spread(listeners, 9), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(Spread(listeners, 30), (std::vector<int>{10, 10, 10}));
}

TEST_F(ReuseportKernelTest, OneProgramServesSeveralGroups) {
  auto balancer = ReuseportBalancer::Create(2);
  ASSERT_TRUE(balancer.ok()) << balancer.status();
  std::vector<base::UniqueFd> a = Listeners(2);
  std::vector<base::UniqueFd> b = Listeners(2);
  ASSERT_TRUE((*balancer)->Attach(a[0].get()).ok());
  ASSERT_TRUE((*balancer)->Attach(b[1].get()).ok());  // any member attaches for its group
  EXPECT_EQ(Spread(a, 4), (std::vector<int>{2, 2}));
  EXPECT_EQ(Spread(b, 6), (std::vector<int>{3, 3}));
}

TEST_F(ReuseportKernelTest, AGroupSmallerThanTheWorkerCountLosesNoConnection) {
  // A group with a listener gone (a worker's, being torn down): an index past its end falls
  // back to the kernel's hash, so every connection still lands on some listener.
  auto balancer = ReuseportBalancer::Create(4);
  ASSERT_TRUE(balancer.ok()) << balancer.status();
  std::vector<base::UniqueFd> listeners = Listeners(2);
  ASSERT_TRUE((*balancer)->Attach(listeners[0].get()).ok());
  std::vector<int> got = Spread(listeners, 20);
  EXPECT_EQ(got[0] + got[1], 20);
}

}  // namespace
}  // namespace sluice::fastpath
