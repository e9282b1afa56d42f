// SPDX-License-Identifier: Apache-2.0
// The sockmap mechanism on the real kernel, below the session: probe and self-test, insertion
// failures, byte integrity through the verdict program (also when TCP repeats bytes), and flow
// control by passing. Each test runs in its own network namespace; without CAP_BPF/CAP_NET_ADMIN
// they skip.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "lib/net/socket.h"

#include "agent/dataplane/fastpath/flow_ring.h"
#include "agent/dataplane/fastpath/sockmap_fast_path.h"
#include "agent/dataplane/fastpath/sockmap_link.h"
#include "agent/dataplane/proxy/sockmap_probe.h"
#include "agent/dataplane/proxy/test_sockets.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"
#include "tests/testutil/tun_tcp_peer.h"

namespace sluice::fastpath {
namespace {

using proxy::testing::MakeTcpPair;
using proxy::testing::SendAll;
using Pair = proxy::testing::TcpPair;  // near: the proxy's non-blocking end; far: the peer

// Both ends as the proxy has them after dialling (near is non-blocking and connected).
Pair LoopbackPair() { return MakeTcpPair(/*dialed=*/true); }

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    memcpy(&s[i], &v, std::min<size_t>(8, n - i));
  }
  return s;
}

// Bytes compared without printing them: where the first difference is.
::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  const auto diff = std::mismatch(got.begin(), got.end(), want.begin(), want.end());
  if (diff.first == got.end() && diff.second == want.end()) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "received " << got.size() << " of " << want.size()
                                       << " bytes, first wrong at " << (diff.first - got.begin());
}

std::string RecvExactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, &out[got], n - got, 0);
    if (r <= 0) {
      break;
    }
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

class SockmapKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (CAP_BPF, CAP_NET_ADMIN, network namespaces)";
    }
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    netns_ = std::move(*ns);
  }
  std::unique_ptr<SockmapFastPath> Load(uint32_t max_connections = 64) {
    auto fp = SockmapFastPath::Create({.max_connections = max_connections, .rings = 1});
    EXPECT_TRUE(fp.ok()) << fp.status();
    return fp.ok() ? std::move(*fp) : nullptr;
  }
  std::unique_ptr<testutil::NetNs> netns_;
};

TEST_F(SockmapKernelTest, ProbeAndSelfTestPass) {
  proxy::ProbeResult r = proxy::ProbeSockmap({.max_connections = 16, .rings = 2});
  ASSERT_TRUE(r.status.ok()) << r.reason << ": " << r.status;
  ASSERT_NE(r.fast_path, nullptr);
  // The self-test can run again on the same maps: it leaves nothing behind.
  absl::Status again = proxy::SockmapSelfTest(*r.fast_path);
  EXPECT_TRUE(again.ok()) << again;
}

TEST_F(SockmapKernelTest, ClientThatAlreadySentFinIsRefusedAndLeavesNothing) {
  auto fp = Load();
  ASSERT_NE(fp, nullptr);
  Pair client = LoopbackPair(), backend = LoopbackPair();
  shutdown(client.far.get(), SHUT_WR);
  pollfd p{.fd = client.near.get(), .events = POLLRDHUP, .revents = 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);
  auto link = SockmapLink::Enrol(*fp, client.near.get(), backend.near.get(), 0, 1 << 20);
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(FallbackFor(link.status()), Fallback::kNotEstablished) << link.status();
  auto cookie = SocketCookie(client.near.get());
  ASSERT_TRUE(cookie.ok());
  EXPECT_FALSE(fp->Count(*cookie).ok());  // untracked again
  EXPECT_FALSE(fp->Attached(*cookie));
}

TEST_F(SockmapKernelTest, FullMapsAreReportedAsMapFull) {
  auto fp = Load(/*max_connections=*/1);
  ASSERT_NE(fp, nullptr);
  Pair c1 = LoopbackPair(), b1 = LoopbackPair(), c2 = LoopbackPair(), b2 = LoopbackPair();
  auto first = SockmapLink::Enrol(*fp, c1.near.get(), b1.near.get(), 0, 1 << 20);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = SockmapLink::Enrol(*fp, c2.near.get(), b2.near.get(), 0, 1 << 20);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(FallbackFor(second.status()), Fallback::kMapFull) << second.status();
  first->reset();
  EXPECT_TRUE(SockmapLink::Enrol(*fp, c2.near.get(), b2.near.get(), 0, 1 << 20).ok());
}

TEST_F(SockmapKernelTest, BothDirectionsAtOnceKeepEveryByte) {
  auto fp = Load();
  ASSERT_NE(fp, nullptr);
  Pair client = LoopbackPair(), backend = LoopbackPair();
  auto link = SockmapLink::Enrol(*fp, client.near.get(), backend.near.get(), 0, 0);
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE((*link)->Attach(Side::kClient).ok());
  ASSERT_TRUE((*link)->Attach(Side::kBackend).ok());
  const std::string up = RandomBytes(32 << 20, 1), down = RandomBytes(32 << 20, 2);
  std::string got_up, got_down;
  std::thread t1([&] { EXPECT_TRUE(SendAll(client.far.get(), up)); });
  std::thread t2([&] { EXPECT_TRUE(SendAll(backend.far.get(), down)); });
  std::thread t3([&] { got_up = RecvExactly(backend.far.get(), up.size()); });
  got_down = RecvExactly(client.far.get(), down.size());
  t1.join();
  t2.join();
  t3.join();
  EXPECT_TRUE(got_up == up) << got_up.size();
  EXPECT_TRUE(got_down == down) << got_down.size();
  auto p = (*link)->Measure(Side::kClient, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->consumed, up.size());
  EXPECT_EQ(p->written, up.size());
  p = (*link)->Measure(Side::kBackend, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->consumed, down.size());
}

// A backend that does not read: the kernel queues redirected bytes without bound (pitfall 2)
// until the source passes instead. Passed bytes stay on the source socket, charged to it, so its
// receive window closes and the client stops; the agent forwards them itself, resumes, and
// later bytes follow in order.
TEST_F(SockmapKernelTest, PassingHoldsBytesOnTheSourceAndResumeRedirectsAgain) {
  auto fp = Load();
  ASSERT_NE(fp, nullptr);
  Pair client = LoopbackPair(), backend = LoopbackPair();
  uint64_t signalled = 0;
  auto ring = FlowRing::Create(*fp, 0, [&](uint64_t cookie, uint64_t) { signalled = cookie; });
  ASSERT_TRUE(ring.ok()) << ring.status();
  auto link = SockmapLink::Enrol(*fp, client.near.get(), backend.near.get(), 0, 4 << 20);
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE((*link)->Attach(Side::kClient).ok());
  const std::string data = RandomBytes(96 << 20, 3);
  std::thread writer([&] { SendAll(client.far.get(), data); });
  pollfd p{.fd = (*ring)->fd(), .events = POLLIN, .revents = 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "no signal at the 4 MiB mark";
  (*ring)->Consume();
  EXPECT_EQ(signalled, (*link)->cookie(Side::kClient));
  ASSERT_TRUE((*link)->Pass(Side::kClient).ok());
  absl::SleepFor(absl::Milliseconds(300));
  const Progress held = *(*link)->Measure(Side::kClient, 0);
  absl::SleepFor(absl::Milliseconds(300));
  const Progress later = *(*link)->Measure(Side::kClient, 0);
  EXPECT_EQ(later.consumed, held.consumed) << "passing, yet redirected";
  EXPECT_LT(later.passed, 32u << 20) << "bounded by the source's receive buffer";
  // Drain what was redirected; then forward passed bytes ourselves until the program agrees
  // that we caught up (a byte passed after our last read keeps it passing).
  std::string got = RecvExactly(backend.far.get(), later.consumed);
  std::thread reader([&] { got += RecvExactly(backend.far.get(), data.size() - got.size()); });
  fcntl(backend.near.get(), F_SETFL, fcntl(backend.near.get(), F_GETFL) & ~O_NONBLOCK);
  uint64_t forwarded = 0;
  char buf[1 << 16];
  for (int round = 0; round < 1000; ++round) {
    ssize_t n;
    while ((n = recv(client.near.get(), buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      ASSERT_TRUE(SendAll(backend.near.get(), std::string(buf, static_cast<size_t>(n))));
      forwarded += static_cast<uint64_t>(n);
    }
    ASSERT_TRUE((*link)->Resume(Side::kClient, forwarded, 0).ok());
    absl::SleepFor(absl::Milliseconds(1));
    if ((*link)->Measure(Side::kClient, forwarded)->passed == forwarded) {
      break;  // the program redirects again
    }
  }
  writer.join();
  reader.join();
  EXPECT_TRUE(got == data) << got.size();
  const Progress end = *(*link)->Measure(Side::kClient, forwarded);
  EXPECT_EQ(end.consumed + end.passed, data.size());
}

// Why pausing is pass/resume: deleting an attached socket from the attach map while bytes
// arrive (and re-attaching it) drops or reorders bytes on this kernel, because a verdict run
// already in progress finds no program and drops its skb. Many pause/resume cycles through the
// program's pass mode keep every byte in order.
TEST_F(SockmapKernelTest, PauseResumeCyclesUnderLoadKeepEveryByte) {
  auto fp = Load();
  ASSERT_NE(fp, nullptr);
  Pair client = LoopbackPair(), backend = LoopbackPair();
  auto link = SockmapLink::Enrol(*fp, client.near.get(), backend.near.get(), 0, 0);
  ASSERT_TRUE(link.ok()) << link.status();
  ASSERT_TRUE((*link)->Attach(Side::kClient).ok());
  const std::string data = RandomBytes(192 << 20, 4);
  // The writer starts inside the first pass window, so that window surely passes bytes to us:
  // whether a later 500 us window catches the writer running is up to the scheduler (a loaded
  // machine can leave every one of them empty).
  absl::Notification first_pass;
  std::thread writer([&] {
    first_pass.WaitForNotification();
    SendAll(client.far.get(), data);
  });
  std::string got;
  std::thread reader([&] { got = RecvExactly(backend.far.get(), data.size()); });
  // A failed assertion returns with the threads possibly blocked: unblock them, then join.
  absl::Cleanup join = [&] {
    if (!first_pass.HasBeenNotified()) {
      first_pass.Notify();
    }
    if (HasFailure()) {
      shutdown(client.far.get(), SHUT_RDWR);
      shutdown(backend.far.get(), SHUT_RDWR);
    }
    writer.join();
    reader.join();
  };
  fcntl(backend.near.get(), F_SETFL, fcntl(backend.near.get(), F_GETFL) & ~O_NONBLOCK);
  uint64_t forwarded = 0;
  char buf[1 << 16];
  int cycles = 0;  // completed pass/resume cycles (a loaded machine may finish in one)
  auto measure = [&] {
    auto p = (*link)->Measure(Side::kClient, forwarded);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.value_or(Progress{});
  };
  while (cycles < 300) {
    ++cycles;
    // Lets the program redirect for a while between pauses; how much it gets to is not asserted.
    absl::SleepFor(absl::Microseconds(500));
    ASSERT_TRUE((*link)->Pass(Side::kClient).ok());
    if (!first_pass.HasBeenNotified()) {
      first_pass.Notify();
      // Every byte sent from now on arrives while passing: one must come to us.
      ASSERT_TRUE(testutil::WaitFor([&] { return measure().passed > 0; }, absl::Seconds(30)))
          << "passing, yet nothing passed";
    }
    // Wait for the psock queue to empty, then forward passed bytes until caught up.
    while (measure().in_flight() > 0) {
      absl::SleepFor(absl::Microseconds(100));
    }
    for (;;) {
      ssize_t n;
      while ((n = recv(client.near.get(), buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
        ASSERT_TRUE(SendAll(backend.near.get(), std::string(buf, static_cast<size_t>(n))));
        forwarded += static_cast<uint64_t>(n);
      }
      ASSERT_TRUE((*link)->Resume(Side::kClient, forwarded, 0).ok());
      const Progress p = measure();
      ASSERT_LE(p.passed, forwarded + sizeof(buf) * 1024) << "cycle " << cycles;
      if (p.passed == forwarded) {
        break;
      }
    }
    if (measure().consumed + forwarded >= data.size()) {
      break;
    }
  }
  std::move(join).Invoke();
  EXPECT_GT(forwarded, 0u);  // the first cycle passed bytes through us
  const Progress end = measure();
  EXPECT_TRUE(SameBytes(got, data)) << cycles << " cycles, " << forwarded << " forwarded by us, "
                                    << end.consumed << " redirected, " << end.passed << " passed";
}

// A retransmission that repeats the head of what the socket already has: the peer sends stream
// bytes [0, 1000), then [500, 3000), then [3000, 3100). TCP queues the middle segment whole
// ("partial packet" in tcp_data_queue); recvmsg skips its first 500 bytes by copied_seq, but the
// verdict's tcp_read_skb hands it over whole, so the program must cut them (cut_repeat).
constexpr size_t kFirstEnd = 1000;
constexpr size_t kRetransmitStart = 500;
constexpr size_t kRetransmitEnd = 3000;
constexpr size_t kStreamSize = 3100;
constexpr uint64_t kRepeated = kFirstEnd - kRetransmitStart;
// Stream byte 0 at sequence 2^32 - 512, so the repeated bytes straddle the wrap.
constexpr uint32_t kPeerIsn = 0xfffffdff;

// Reads `n` bytes from a non-blocking socket, or what came within `timeout`. recv is retried
// every 50 ms even without a poll event, so nothing hinges on poll's view of a psock queue.
std::string RecvWithin(int fd, size_t n, absl::Duration timeout = absl::Seconds(20)) {
  std::string out(n, '\0');
  size_t got = 0;
  const absl::Time deadline = absl::Now() + timeout;
  while (got < n && absl::Now() < deadline) {
    const ssize_t r = recv(fd, &out[got], n - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
    } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
      break;
    } else {
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      poll(&p, 1, 50);
    }
  }
  out.resize(got);
  return out;
}

// A TcpExt counter of the calling thread's network namespace (/proc/net/netstat: a line of
// names, then a line of values); ~0 if there is none.
uint64_t TcpExtCounter(const std::string& name) {
  std::ifstream netstat("/proc/thread-self/net/netstat");
  std::string names, values;
  while (std::getline(netstat, names) && std::getline(netstat, values)) {
    if (names.rfind("TcpExt:", 0) != 0) {
      continue;
    }
    std::istringstream n(names), v(values);
    std::string key, value;
    while (n >> key && v >> value) {
      uint64_t count = 0;
      if (key == name && absl::SimpleAtoi(value, &count)) {
        return count;
      }
    }
  }
  return ~0ULL;
}

class SockmapRepeatTest : public SockmapKernelTest {
 protected:
  void SetUp() override {
    SockmapKernelTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    auto peer = testutil::TunTcpPeer::Create();
    ASSERT_TRUE(peer.ok()) << peer.status();
    peer_ = std::move(*peer);
    auto listener = net::ListenTcp(
        *net::SocketAddress::Parse(absl::StrCat(testutil::TunTcpPeer::kLocalAddress, ":0")), false,
        4);
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = std::move(*listener);
    auto local = net::LocalAddress(listener_.get());
    ASSERT_TRUE(local.ok()) << local.status();
    listen_port_ = local->port();
  }

  // The kernel's socket of a new connection from the peer's `port`, non-blocking as the agent
  // accepts it; invalid on failure (reported).
  base::UniqueFd Accept(uint16_t port, testutil::TunTcpPeer::Flow* flow) {
    auto f = peer_->Connect(port, listen_port_, kPeerIsn);
    EXPECT_TRUE(f.ok()) << f.status();
    pollfd p{.fd = listener_.get(), .events = POLLIN, .revents = 0};
    if (!f.ok() || poll(&p, 1, 10000) != 1) {
      ADD_FAILURE() << "no connection to accept";
      return base::UniqueFd();
    }
    *flow = *f;
    return base::UniqueFd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  }

  // Sends stream_ with its bytes [500, 1000) repeated, each segment once the previous one is
  // acked (so the kernel sees them in this order).
  void SendWithRepeatedHead(const testutil::TunTcpPeer::Flow& flow) {
    const std::string_view stream(stream_);
    const std::pair<size_t, size_t> segments[] = {
        {0, kFirstEnd}, {kRetransmitStart, kRetransmitEnd}, {kRetransmitEnd, kStreamSize}};
    for (auto [from, to] : segments) {
      const absl::Status sent =
          peer_->Send(flow, static_cast<uint32_t>(from), stream.substr(from, to - from));
      ASSERT_TRUE(sent.ok()) << sent;
      const absl::Status acked = peer_->WaitForAck(flow, static_cast<uint32_t>(to));
      ASSERT_TRUE(acked.ok()) << acked;
    }
  }

  // Enrolled, the socket gets the same segments; redirected or passed, the stream comes out once
  // and the program counts the repeated head it cut off.
  void ExpectRepeatedHeadCutOnce(bool pass, uint16_t port) {
    auto fp = Load();
    ASSERT_NE(fp, nullptr);
    testutil::TunTcpPeer::Flow flow;
    base::UniqueFd client = Accept(port, &flow);
    ASSERT_TRUE(client.valid());
    Pair backend = LoopbackPair();
    auto link = SockmapLink::Enrol(*fp, client.get(), backend.near.get(), 0, 0);
    ASSERT_TRUE(link.ok()) << link.status();
    ASSERT_TRUE((*link)->Attach(Side::kClient).ok());
    if (pass) {
      ASSERT_TRUE((*link)->Pass(Side::kClient).ok());
    }
    SendWithRepeatedHead(flow);
    const std::string got =
        pass ? RecvWithin(client.get(), kStreamSize) : RecvExactly(backend.far.get(), kStreamSize);
    EXPECT_TRUE(SameBytes(got, stream_));
    // Counted before the verdict that delivered the last byte returned.
    auto counts = fp->Count((*link)->cookie(Side::kClient));
    ASSERT_TRUE(counts.ok()) << counts.status();
    EXPECT_EQ(counts->repeated, kRepeated);
    EXPECT_EQ(counts->redirected, pass ? 0u : kStreamSize);
    EXPECT_EQ(counts->passed, pass ? kStreamSize : 0u);
  }

  const std::string stream_ = RandomBytes(kStreamSize, 5);
  std::unique_ptr<testutil::TunTcpPeer> peer_;  // destroyed before the base's namespace
  base::UniqueFd listener_;
  uint16_t listen_port_ = 0;
};

// The twin without the sockmap. The kernel's D-SACK count shows the repeat reached TCP.
TEST_F(SockmapRepeatTest, PlainSocketReadsRepeatedHeadOnce) {
  testutil::TunTcpPeer::Flow flow;
  base::UniqueFd sock = Accept(40001, &flow);
  ASSERT_TRUE(sock.valid());
  SendWithRepeatedHead(flow);
  EXPECT_TRUE(SameBytes(RecvWithin(sock.get(), kStreamSize), stream_));
  EXPECT_EQ(TcpExtCounter("TCPDSACKOldSent"), 1u);
}

TEST_F(SockmapRepeatTest, RedirectDeliversRepeatedHeadOnce) {
  ExpectRepeatedHeadCutOnce(/*pass=*/false, 40002);
}

TEST_F(SockmapRepeatTest, PassingLeavesRepeatedHeadForRecvOnce) {
  ExpectRepeatedHeadCutOnce(/*pass=*/true, 40003);
}

}  // namespace
}  // namespace sluice::fastpath
