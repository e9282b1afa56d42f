// SPDX-License-Identifier: Apache-2.0
#include "lib/event/acceptor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <vector>

#include "gtest/gtest.h"
#include "lib/base/clock.h"

#include "tests/testutil/fd_exhaustion.h"

namespace sluice::event {
namespace {

base::UniqueFd Listen(int* port) {
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
  EXPECT_EQ(listen(fd.get(), 16), 0);
  EXPECT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

base::UniqueFd Connect(int port) {
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// The listener is level-triggered: a connection that cannot be accepted for want of an fd used
// to be reported on every iteration, a busy loop for as long as the shortage lasted.
TEST(AcceptorTest, OutOfDescriptorsPausesInsteadOfSpinningThenResumes) {
  base::FakeClock clock;
  auto loop = EventLoop::Create(clock);
  ASSERT_TRUE(loop.ok()) << loop.status();
  int port = 0;
  base::UniqueFd listener = Listen(&port);
  int accepted = 0;
  auto acceptor = Acceptor::Create(**loop, listener.get(), "test listener",
                                   [&](base::UniqueFd fd, const sockaddr_storage&, socklen_t) {
                                     EXPECT_TRUE(fd.valid());
                                     ++accepted;
                                   });
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  base::UniqueFd client = Connect(port);
  {
    testutil::FdExhaustion exhausted;
    ASSERT_TRUE(exhausted.exhausted());
    EXPECT_TRUE((*loop)->RunOnce(absl::ZeroDuration()));  // reported; accept4 fails
    EXPECT_EQ(accepted, 0);
    EXPECT_TRUE((*acceptor)->paused());
    for (int i = 0; i < 3; ++i) {
      EXPECT_FALSE((*loop)->RunOnce(absl::ZeroDuration())) << "the listener is still polled";
    }
  }
  clock.Advance(absl::Seconds(1));
  for (int i = 0; i < 10 && accepted == 0; ++i) {
    (*loop)->RunOnce(absl::ZeroDuration());
  }
  EXPECT_EQ(accepted, 1);
  EXPECT_FALSE((*acceptor)->paused());
}

TEST(AcceptorTest, AcceptsEveryQueuedConnectionWithItsPeer) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok()) << loop.status();
  int port = 0;
  base::UniqueFd listener = Listen(&port);
  std::vector<int> peer_families;
  auto acceptor =
      Acceptor::Create(**loop, listener.get(), "test listener",
                       [&](base::UniqueFd fd, const sockaddr_storage& peer, socklen_t len) {
                         EXPECT_TRUE(fd.valid());
                         EXPECT_EQ(len, sizeof(sockaddr_in));
                         EXPECT_NE(fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
                         peer_families.push_back(peer.ss_family);
                       });
  ASSERT_TRUE(acceptor.ok()) << acceptor.status();
  base::UniqueFd clients[] = {Connect(port), Connect(port), Connect(port)};
  for (int i = 0; i < 100 && peer_families.size() < 3; ++i) {
    (*loop)->RunOnce(absl::Seconds(1));
  }
  EXPECT_EQ(peer_families, std::vector<int>(3, AF_INET));
}

}  // namespace
}  // namespace sluice::event
