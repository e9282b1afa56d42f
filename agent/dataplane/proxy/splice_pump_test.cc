// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/splice_pump.h"

#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>

#include <string>

#include "gtest/gtest.h"
#include "lib/net/socket.h"

#include "agent/dataplane/proxy/test_sockets.h"

// The pump is driven by hand here (readiness edges are method calls), which pins the EAGAIN, EOF
// and fallback contracts without timing; tcp_session_test runs it under a real EventLoop.
namespace sluice::proxy {
namespace {

using testing::MakeTcpPair;
using testing::RandomBytes;
using Result = SplicePump::Result;

class SplicePumpTest : public ::testing::TestWithParam<bool> {
 protected:
  // splice(2) into a socket has no MSG_NOSIGNAL: EPIPE also raises SIGPIPE. main() ignores it.
  void SetUp() override { signal(SIGPIPE, SIG_IGN); }
  bool use_splice() const { return GetParam(); }
  SplicePump::Path expected_path() const {
    return use_splice() ? SplicePump::Path::kSplice : SplicePump::Path::kCopy;
  }

  // Waits until `n` bytes sent by a peer are queued on fd, so a pump read sees them all.
  static void WaitQueued(int fd, int n) {
    for (int i = 0; i < 100000; ++i) {
      int queued = 0;
      ASSERT_EQ(ioctl(fd, SIOCINQ, &queued), 0);
      if (queued >= n) {
        return;
      }
      sched_yield();
    }
    FAIL() << "bytes never arrived";
  }
  static std::string RecvExactly(int fd, size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (got < n) {
      ssize_t r = recv(fd, out.data() + got, n - got, 0);
      if (r <= 0) {
        break;
      }
      got += static_cast<size_t>(r);
    }
    out.resize(got);
    return out;
  }

  // src's peer sends `data` and its FIN; returns once the data is queued at the pump's end.
  void SrcPeerSendsAndCloses(const std::string& data) {
    ASSERT_TRUE(testing::SendAll(src_.far.get(), data));
    ASSERT_EQ(shutdown(src_.far.get(), SHUT_WR), 0);
    WaitQueued(src_.near.get(), static_cast<int>(data.size()));
  }

  testing::TcpPair src_ = MakeTcpPair(false);
  testing::TcpPair dst_ = MakeTcpPair(true);
};

INSTANTIATE_TEST_SUITE_P(SpliceOnOff, SplicePumpTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Splice" : "Copy"; });

TEST_P(SplicePumpTest, EagainWithBytesInPipeFlushesThenKeepsReading) {
  // A one-slot pipe and small segments: the pipe fills after the first segment, so splice
  // returns EAGAIN with bytes in the pipe although the socket still has data (A12).
  PipePool pool({.pipe_size = 4096});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  int one = 1;
  ASSERT_EQ(setsockopt(src_.far.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
  std::string data = RandomBytes(10, 1);
  ASSERT_TRUE(testing::SendAll(src_.far.get(), data));
  WaitQueued(src_.near.get(), 10);
  std::string more = RandomBytes(30000, 2);
  ASSERT_TRUE(testing::SendAll(src_.far.get(), more));
  data += more;
  WaitQueued(src_.near.get(), static_cast<int>(data.size()));

  pump.OnSrcReadable();                      // the only readable edge this test delivers
  EXPECT_EQ(pump.Pump(), Result::kWaiting);  // dst not writable yet: bytes wait in the pipe
  EXPECT_GT(pump.pending(), 0u);
  EXPECT_EQ(pump.bytes(), 0u);

  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kWaiting);  // moved everything, then src EAGAIN: drained
  EXPECT_EQ(pump.pending(), 0u);
  EXPECT_EQ(pump.bytes(), data.size());
  EXPECT_EQ(pump.path(), expected_path());
  EXPECT_EQ(RecvExactly(dst_.far.get(), data.size()), data);
  EXPECT_EQ(pool.idle(), use_splice() ? 1u : 0u);  // the drained pipe went back at once
}

TEST_P(SplicePumpTest, EofIsReportedOnlyAfterThePipeIsFlushed) {
  PipePool pool({});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  SrcPeerSendsAndCloses("request");

  pump.OnSrcReadable();
  EXPECT_EQ(pump.Pump(), Result::kWaiting);  // EOF seen, but 7 bytes still wait for dst (A13)
  EXPECT_EQ(pump.pending(), 7u);
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kEof);
  EXPECT_EQ(pump.Pump(), Result::kWaiting);  // reported once
  EXPECT_EQ(RecvExactly(dst_.far.get(), 7), "request");
}

// Bytes written to a TCP socket and not yet sent: held back by MSG_MORE, here. Read at the
// sender, so it does not depend on when the peer's softirq runs.
int Unsent(int fd) {
  int unsent = -1;
  EXPECT_EQ(ioctl(fd, SIOCOUTQNSD, &unsent), 0);
  return unsent;
}

TEST_P(SplicePumpTest, KnownFinLeavesInOneSegmentWithTheLastBytes) {
  PipePool pool({});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  SrcPeerSendsAndCloses("response");

  pump.OnSrcFin();  // EPOLLRDHUP came with the data
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kEof);
  EXPECT_EQ(Unsent(dst_.near.get()), 8);  // written with MSG_MORE: waiting for the FIN
  ASSERT_EQ(shutdown(dst_.near.get(), SHUT_WR), 0);
  EXPECT_EQ(Unsent(dst_.near.get()), 0);  // sent with the FIN
  EXPECT_EQ(RecvExactly(dst_.far.get(), 8), "response");
  char c;
  EXPECT_EQ(recv(dst_.far.get(), &c, 1, 0), 0);  // and then EOF
}

TEST_P(SplicePumpTest, BytesLeaveAtOnceWhileNoFinIsKnown) {
  PipePool pool({});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  SrcPeerSendsAndCloses("response");

  pump.OnSrcReadable();
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kEof);  // the EOF read came after the write
  EXPECT_EQ(Unsent(dst_.near.get()), 0);
}

TEST_P(SplicePumpTest, SourceResetIsAnErrorAtSrc) {
  PipePool pool({});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  ASSERT_TRUE(net::SetLingerZero(src_.far.get()).ok());
  src_.far.Reset();  // RST
  pump.OnSrcReadable();
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kError);
  EXPECT_TRUE(pump.error_at_src());
  EXPECT_EQ(pump.error(), ECONNRESET);
}

TEST_P(SplicePumpTest, DestinationResetIsAnErrorAtDst) {
  PipePool pool({});
  SplicePump pump(src_.near.get(), dst_.near.get(), pool, use_splice());
  ASSERT_TRUE(net::SetLingerZero(dst_.far.get()).ok());
  dst_.far.Reset();
  ASSERT_TRUE(testing::SendAll(src_.far.get(), "data"));
  WaitQueued(src_.near.get(), 4);
  pump.OnSrcReadable();
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kError);
  EXPECT_FALSE(pump.error_at_src());
  EXPECT_TRUE(pump.error() == ECONNRESET || pump.error() == EPIPE) << strerror(pump.error());
}

TEST(SplicePumpFallbackTest, EinvalBeforeFirstByteFallsBackToCopy) {
  // An eventfd has no splice_read, so splice(2) from it fails with EINVAL: a real kernel refusal
  // standing in for a socket type that cannot splice.
  base::UniqueFd efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ASSERT_TRUE(efd.valid());
  uint64_t value = 0x0102030405060708;
  ASSERT_EQ(write(efd.get(), &value, sizeof(value)), 8);
  testing::TcpPair dst = MakeTcpPair(true);
  PipePool pool({});
  SplicePump pump(efd.get(), dst.near.get(), pool, /*use_splice=*/true);
  pump.OnSrcReadable();
  pump.OnDstWritable();
  EXPECT_EQ(pump.Pump(), Result::kWaiting);
  EXPECT_EQ(pump.path(), SplicePump::Path::kCopy);
  EXPECT_EQ(pump.bytes(), 8u);
  EXPECT_EQ(pool.idle(), 1u);  // the pipe it tried went back, empty
  uint64_t got = 0;
  ASSERT_EQ(recv(dst.far.get(), &got, sizeof(got), MSG_WAITALL), 8);
  EXPECT_EQ(got, value);
}

}  // namespace
}  // namespace sluice::proxy
