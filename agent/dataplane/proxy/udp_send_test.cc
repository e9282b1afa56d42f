// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_send.h"

#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include "lib/net/socket.h"

#include "agent/dataplane/proxy/test_sockets.h"
#include "tests/testutil/netns.h"

// UdpSender against real loopback sockets: whatever it packs into GSO messages must arrive as
// the same datagrams, with the same boundaries, in order.
namespace sluice::proxy {
namespace {

using testing::RandomBytes;

base::UniqueFd BoundUdp() {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in sin{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  return fd;
}

// A connected sender and its receiver, as a flow socket and its backend.
struct Pair {
  base::UniqueFd sender = BoundUdp();
  base::UniqueFd receiver = BoundUdp();
  Pair() {
    sockaddr_storage ss;
    socklen_t len = net::LocalAddress(receiver.get())->ToSockaddr(&ss);
    EXPECT_EQ(connect(sender.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  }
};

// One datagram, or nullopt after 10 s. `gso_size` receives the UDP_GRO size, 0 if none.
std::optional<std::string> Receive(int fd, int* gso_size = nullptr) {
  pollfd p{.fd = fd, .events = POLLIN};
  if (poll(&p, 1, 10000) != 1) {
    return std::nullopt;
  }
  std::string buf(65536, '\0');
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control[64];
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = control;
  h.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &h, MSG_DONTWAIT);
  if (n < 0) {
    return std::nullopt;
  }
  if (gso_size != nullptr) {
    *gso_size = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        std::memcpy(gso_size, CMSG_DATA(c), sizeof(int));
      }
    }
  }
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// `seed` tells batches of equal sizes apart.
std::vector<std::string> Payloads(const std::vector<size_t>& sizes, uint32_t seed = 1) {
  std::vector<std::string> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.push_back(RandomBytes(sizes[i], seed + static_cast<uint32_t>(i)));
  }
  return out;
}

UdpSendResult SendAll(int fd, std::vector<std::string>& payloads, UdpGsoState* gso,
                      const UdpPeer& peer = {}) {
  std::vector<iovec> iov;
  iov.reserve(payloads.size());
  for (std::string& p : payloads) {
    iov.push_back(iovec{p.data(), p.size()});
  }
  UdpSender sender;
  return sender.Send(fd, iov.data(), static_cast<int>(iov.size()), peer, gso);
}

void ExpectReceived(int fd, const std::vector<std::string>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    auto got = Receive(fd);
    ASSERT_TRUE(got) << "datagram " << i << " missing";
    EXPECT_EQ(got->size(), want[i].size()) << "datagram " << i;
    EXPECT_EQ(*got, want[i]) << "datagram " << i;
  }
  pollfd p{.fd = fd, .events = POLLIN};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "more datagrams than sent";
}

class UdpSenderTest : public ::testing::TestWithParam<bool> {
 protected:
  UdpGsoState* Gso() { return GetParam() ? &gso_ : nullptr; }
  UdpGsoState gso_;
};

TEST_P(UdpSenderTest, EqualSizeRunArrivesAsTheSameDatagrams) {
  Pair pair;
  auto payloads = Payloads(std::vector<size_t>(20, 64));
  const UdpSendResult r = SendAll(pair.sender.get(), payloads, Gso());
  EXPECT_EQ(r.delivered, 20);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.hard_error, 0);
  ExpectReceived(pair.receiver.get(), payloads);
}

TEST_P(UdpSenderTest, ShortLastDatagramKeepsItsBoundary) {
  Pair pair;
  auto payloads = Payloads({100, 100, 100, 37});
  EXPECT_EQ(SendAll(pair.sender.get(), payloads, Gso()).delivered, 4);
  ExpectReceived(pair.receiver.get(), payloads);
}

TEST_P(UdpSenderTest, MixedSizesAndEmptyDatagramsKeepOrderAndBoundaries) {
  Pair pair;
  // Runs end at a larger datagram, after a shorter one and around an empty one.
  auto payloads = Payloads({100, 100, 200, 200, 200, 50, 50, 300, 1, 1, 0, 8, 8, 0, 0, 9, 3, 3});
  EXPECT_EQ(SendAll(pair.sender.get(), payloads, Gso()).delivered,
            static_cast<int>(payloads.size()));
  ExpectReceived(pair.receiver.get(), payloads);
}

TEST_P(UdpSenderTest, RunsLongerThanOneDatagramCanCarryAreSplit) {
  Pair pair;
  int rcvbuf = 4 << 20;  // 32 x 9000 bytes must all fit
  ASSERT_EQ(setsockopt(pair.receiver.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
  auto payloads = Payloads(std::vector<size_t>(UdpSender::kMaxDatagrams, 9000));
  EXPECT_EQ(SendAll(pair.sender.get(), payloads, Gso()).delivered, UdpSender::kMaxDatagrams);
  ExpectReceived(pair.receiver.get(), payloads);
}

TEST_P(UdpSenderTest, UnconnectedSocketWithNameAndPacketInfo) {
  base::UniqueFd sender = BoundUdp();
  base::UniqueFd receiver = BoundUdp();
  sockaddr_storage ss;
  const socklen_t len = net::LocalAddress(receiver.get())->ToSockaddr(&ss);
  alignas(cmsghdr) char control[64];
  in_pktinfo info{};
  info.ipi_spec_dst.s_addr = htonl(INADDR_LOOPBACK);
  const size_t control_len = PutCmsg(control, IPPROTO_IP, IP_PKTINFO, &info, sizeof(info));
  auto payloads = Payloads({500, 500, 500, 499, 7});
  const UdpPeer peer{.name = reinterpret_cast<sockaddr*>(&ss),
                     .name_len = len,
                     .control = control,
                     .control_len = control_len};
  EXPECT_EQ(SendAll(sender.get(), payloads, Gso(), peer).delivered, 5);
  ExpectReceived(receiver.get(), payloads);
}

INSTANTIATE_TEST_SUITE_P(Gso, UdpSenderTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

// A receiver with UDP_GRO takes a GSO message whole (udp_unexpected_gso): proof that the run
// really went out as one message, and of the size it was cut at.
TEST(UdpSenderGsoTest, EqualSizeRunIsOneGsoMessage) {
  if (!UdpGsoSupported()) {
    GTEST_SKIP() << "no UDP_SEGMENT on this kernel";
  }
  Pair pair;
  int on = 1;
  ASSERT_EQ(setsockopt(pair.receiver.get(), SOL_UDP, UDP_GRO, &on, sizeof(on)), 0);
  auto payloads = Payloads({64, 64, 64, 64, 10, 30});
  UdpGsoState gso;
  EXPECT_EQ(SendAll(pair.sender.get(), payloads, &gso).delivered, 6);
  int gso_size = 0;
  EXPECT_EQ(Receive(pair.receiver.get(), &gso_size),
            payloads[0] + payloads[1] + payloads[2] + payloads[3] + payloads[4]);
  EXPECT_EQ(gso_size, 64);
  EXPECT_EQ(Receive(pair.receiver.get(), &gso_size), payloads[5]);  // after the short end
  EXPECT_EQ(gso.max_segment, 65535u);
}

// Sets the MTU of `lo` in the calling thread's network namespace.
absl::Status SetLoopbackMtu(int mtu) {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket(AF_INET)");
  }
  ifreq request{};
  strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  request.ifr_mtu = mtu;
  if (ioctl(fd.get(), SIOCSIFMTU, &request) < 0) {
    return base::ErrnoStatus(errno, "ioctl(SIOCSIFMTU lo)");
  }
  return absl::OkStatus();
}

// The fallback when the route refuses a segment size, provoked for real: udp_send_skb fails a
// GSO message when one segment plus headers exceeds the route's MTU (EINVAL; EMSGSIZE on 6.18,
// checked with strace). Narrowing means max_segment drops to just below the refused size, so
// that size goes out one datagram per message from then on while smaller runs keep GSO.
TEST(UdpSenderGsoTest, SegmentSizeOverMtuIsRefusedAndSentOneByOne) {
  if (!UdpGsoSupported()) {
    GTEST_SKIP() << "no UDP_SEGMENT on this kernel";
  }
  // A namespace of the test's own, so that lo's MTU can shrink without touching the host. It
  // is declared first to outlive the sockets made inside it.
  absl::StatusOr<std::unique_ptr<testutil::NetNs>> netns = testutil::NetNs::Create();
  if (absl::IsPermissionDenied(netns.status())) {
    GTEST_SKIP() << "needs CAP_SYS_ADMIN for a network namespace: " << netns.status();
  }
  ASSERT_TRUE(netns.ok()) << netns.status();
  // 1200 + 28 header bytes exceed 1000; 500 + 28 do not. A lone 1200-byte datagram is still
  // sent: IP_PMTUDISC_WANT (the default) lets the kernel fragment it.
  constexpr int kMtu = 1000;
  constexpr size_t kRefused = 1200;
  constexpr size_t kFits = 500;
  const absl::Status mtu = SetLoopbackMtu(kMtu);
  ASSERT_TRUE(mtu.ok()) << mtu;
  Pair pair;
  // With UDP_GRO the receiver takes a GSO message whole (udp_unexpected_gso), so a run that
  // went out as one message would show up as one merged datagram and fail ExpectReceived.
  int on = 1;
  ASSERT_EQ(setsockopt(pair.receiver.get(), SOL_UDP, UDP_GRO, &on, sizeof(on)), 0);
  UdpGsoState gso;

  // The first batch meets the refusal and is resent one by one: nothing lost or merged. Only
  // the refusal moves max_segment off its 65535 start, so it shows that the kernel refused.
  auto refused = Payloads(std::vector<size_t>(8, kRefused), 1);
  UdpSendResult r = SendAll(pair.sender.get(), refused, &gso);
  EXPECT_EQ(r.delivered, 8);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.hard_error, 0);
  EXPECT_EQ(gso.max_segment, kRefused - 1);
  ExpectReceived(pair.receiver.get(), refused);

  // The same size again is no longer offered as GSO, so there is no second refusal to narrow
  // the state further.
  auto again = Payloads(std::vector<size_t>(8, kRefused), 101);
  r = SendAll(pair.sender.get(), again, &gso);
  EXPECT_EQ(r.delivered, 8);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(gso.max_segment, kRefused - 1);
  ExpectReceived(pair.receiver.get(), again);

  // A size under the narrowed limit that fits the MTU is still one GSO message.
  auto fits = Payloads(std::vector<size_t>(8, kFits), 201);
  EXPECT_EQ(SendAll(pair.sender.get(), fits, &gso).delivered, 8);
  int gso_size = 0;
  std::string whole;
  for (const std::string& p : fits) {
    whole += p;
  }
  EXPECT_EQ(Receive(pair.receiver.get(), &gso_size), whole);
  EXPECT_EQ(gso_size, static_cast<int>(kFits));
  EXPECT_EQ(gso.max_segment, kRefused - 1);
}

}  // namespace
}  // namespace sluice::proxy
