// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/tcp_session.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <optional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "lib/base/metrics.h"
#include "lib/net/socket.h"

#include "agent/dataplane/fastpath/flow_ring.h"
#include "agent/dataplane/fastpath/sockmap_fast_path.h"
#include "agent/dataplane/proxy/test_sockets.h"

// Real loopback sockets, a real EventLoop on the test thread, and blocking peers on helper
// threads. Every test runs on splice, on copy I/O, and on the sockmap fast path; the sockmap
// runs need CAP_BPF and CAP_NET_ADMIN and skip without them.
namespace sluice::proxy {
namespace {

using testing::Fnv1a;
using testing::MakeTcpPair;
using testing::RandomBytes;
using testing::RecvToEof;
using testing::SendAll;

enum class Mode { kSplice, kCopy, kSockmap };

class TcpSessionTest : public ::testing::TestWithParam<Mode>, public TcpSessionCallbacks {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as main() does: splice(2) into a reset socket raises SIGPIPE
    loop_ = std::move(*event::EventLoop::Create());
    if (GetParam() == Mode::kSockmap) {
      StartSockmap();
      if (sockmap_ == nullptr) {
        GTEST_SKIP() << "sockmap fast path unavailable: " << sockmap_error_;
      }
    }
    watchdog_ = loop_->CreateTimer([this] {
      ADD_FAILURE() << "watchdog fired";
      if (session_ != nullptr) {
        session_->Abort();  // unblocks the peer threads with RST
      }
      loop_->Stop();
    });
    watchdog_->Arm(absl::Seconds(20));
  }
  void TearDown() override {
    session_.reset();
    watchdog_.reset();
    ring_event_.reset();
    ring_.reset();
  }

  // What a worker does: shared maps, a context, and its ring watched by the loop.
  void StartSockmap() {
    auto fp = fastpath::SockmapFastPath::Create({.max_connections = 16, .rings = 1});
    if (!fp.ok()) {
      sockmap_error_ = fp.status().ToString();
      return;
    }
    fast_path_ = std::move(*fp);
    sockmap_ = std::unique_ptr<SockmapContext>(
        new SockmapContext{.fast_path = *fast_path_,
                           .ring = 0,
                           .flow = {.marks = marks_,
                                    .paused = registry_.AddGauge("paused", "").Get(),
                                    .pauses = registry_.AddCounter("pauses", "").Get()}});
    ring_ = std::move(*fastpath::FlowRing::Create(
        *fast_path_, 0, [this](uint64_t cookie, uint64_t) { sockmap_->Dispatch(cookie); }));
    ring_event_ =
        std::move(*loop_->Watch(ring_->fd(), EPOLLIN, [this](uint32_t) { ring_->Consume(); }));
  }

  TcpSession::Options SessionOptions(absl::Duration idle_timeout = absl::Hours(1)) const {
    return TcpSession::Options{.idle_timeout = idle_timeout,
                               .use_splice = GetParam() != Mode::kCopy};
  }

  void StartSession(absl::Duration idle_timeout = absl::Hours(1)) {
    client_ = MakeTcpPair(/*dialed=*/false);
    backend_ = MakeTcpPair(/*dialed=*/true);
    auto session =
        TcpSession::Create(*loop_, pool_, std::move(client_.near), std::move(backend_.near),
                           SessionOptions(idle_timeout), *this, sockmap_.get(), at_start_);
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = std::move(*session);
    if (sockmap_ != nullptr) {
      ASSERT_EQ(session_->fallback(), std::nullopt);
    }
  }

  // TcpSessionCallbacks
  void OnSessionClosed(TcpSession& session, CloseReason reason) override {
    EXPECT_EQ(&session, session_.get());
    EXPECT_FALSE(reason_.has_value()) << "closed twice";
    reason_ = reason;
    to_backend_ = session.bytes_to_backend();
    to_client_ = session.bytes_to_client();
    kernel_to_backend_ = session.kernel_bytes_to_backend();
    kernel_to_client_ = session.kernel_bytes_to_client();
    fallback_ = session.fallback();
    path_ = session.path();
    loop_->DeferDelete(std::move(session_));
    loop_->Stop();
  }

  TcpSession::Path expected_path() const {
    switch (GetParam()) {
      case Mode::kSplice:
        return TcpSession::Path::kSplice;
      case Mode::kCopy:
        return TcpSession::Path::kCopy;
      case Mode::kSockmap:
        return TcpSession::Path::kSockmap;
    }
    return TcpSession::Path::kSplice;
  }

  base::Registry registry_;
  std::unique_ptr<fastpath::SockmapFastPath> fast_path_;
  std::string sockmap_error_;
  SockmapWatermarks marks_;
  // Enrol at once, so the sockmap runs test the kernel path; promotion has its own test.
  bool at_start_ = true;
  std::unique_ptr<SockmapContext> sockmap_;
  std::unique_ptr<event::EventLoop> loop_;
  std::unique_ptr<fastpath::FlowRing> ring_;
  std::unique_ptr<event::FileEvent> ring_event_;
  std::unique_ptr<event::Timer> watchdog_;
  PipePool pool_{PipePool::Options{}};
  testing::TcpPair client_, backend_;  // .far ends are the test's peers
  std::unique_ptr<TcpSession> session_;
  std::optional<CloseReason> reason_;
  uint64_t to_backend_ = 0, to_client_ = 0;
  uint64_t kernel_to_backend_ = 0, kernel_to_client_ = 0;
  std::optional<fastpath::Fallback> fallback_;
  TcpSession::Path path_ = TcpSession::Path::kSplice;
};

INSTANTIATE_TEST_SUITE_P(Paths, TcpSessionTest,
                         ::testing::Values(Mode::kSplice, Mode::kCopy, Mode::kSockmap),
                         [](const auto& info) {
                           return PathName(info.param == Mode::kSplice ? TcpSession::Path::kSplice
                                           : info.param == Mode::kCopy
                                               ? TcpSession::Path::kCopy
                                               : TcpSession::Path::kSockmap);
                         });

TEST_P(TcpSessionTest, EchoesOneMegabyteBothWays) {
  StartSession();
  const std::string request = RandomBytes(1 << 20, 7);
  std::string at_backend, at_client;
  std::thread writer([&] {
    EXPECT_TRUE(SendAll(client_.far.get(), request));
    EXPECT_EQ(shutdown(client_.far.get(), SHUT_WR), 0);
  });
  std::thread reader([&] { at_client = RecvToEof(client_.far.get()); });
  std::thread echo([&] {
    char buf[32 * 1024];
    ssize_t n;
    while ((n = recv(backend_.far.get(), buf, sizeof(buf), 0)) > 0) {
      at_backend.append(buf, static_cast<size_t>(n));
      ASSERT_TRUE(SendAll(backend_.far.get(), std::string(buf, static_cast<size_t>(n))));
    }
    EXPECT_EQ(n, 0);
    EXPECT_EQ(shutdown(backend_.far.get(), SHUT_WR), 0);
  });
  loop_->Run();
  writer.join();
  reader.join();
  echo.join();
  EXPECT_EQ(reason_, CloseReason::kDone);
  EXPECT_EQ(at_backend.size(), request.size());
  EXPECT_EQ(Fnv1a(at_backend), Fnv1a(request));
  EXPECT_EQ(at_client.size(), request.size());
  EXPECT_EQ(Fnv1a(at_client), Fnv1a(request));
  EXPECT_EQ(to_backend_, request.size());
  EXPECT_EQ(to_client_, request.size());
  EXPECT_EQ(path_, expected_path());
  if (GetParam() == Mode::kSockmap) {  // every byte went through the verdict program
    EXPECT_EQ(kernel_to_backend_, request.size());
    EXPECT_EQ(kernel_to_client_, request.size());
  }
  EXPECT_EQ(pool_.closed_non_empty(), 0u);
  EXPECT_EQ(pool_.idle(), pool_.created());  // every pipe came back, empty
  if (GetParam() == Mode::kCopy) {
    EXPECT_EQ(pool_.created(), 0u);
  }
}

TEST_P(TcpSessionTest, ClientHalfCloseStillReceivesWholeReply) {
  StartSession();
  const std::string reply = RandomBytes(size_t{300} * 1024, 9);
  std::string request, at_client;
  std::thread client([&] {
    EXPECT_TRUE(SendAll(client_.far.get(), "GET / HTTP/1.0\r\n\r\n"));
    EXPECT_EQ(shutdown(client_.far.get(), SHUT_WR), 0);
    at_client = RecvToEof(client_.far.get());
  });
  std::thread backend([&] {
    request = RecvToEof(backend_.far.get());  // the forwarded FIN ends the request
    EXPECT_TRUE(SendAll(backend_.far.get(), reply));
    backend_.far.Reset();  // FIN after the reply
  });
  loop_->Run();
  client.join();
  backend.join();
  EXPECT_EQ(request, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(at_client.size(), reply.size());
  EXPECT_EQ(Fnv1a(at_client), Fnv1a(reply));
  EXPECT_EQ(reason_, CloseReason::kDone);
}

TEST_P(TcpSessionTest, BackendSpeaksFirst) {
  client_ = MakeTcpPair(false);
  backend_ = MakeTcpPair(true);
  // The greeting is queued before the session exists (SMTP, MySQL): no later edge announces it.
  ASSERT_TRUE(SendAll(backend_.far.get(), "220 ready\r\n"));
  session_ = std::move(*TcpSession::Create(*loop_, pool_, std::move(client_.near),
                                           std::move(backend_.near), SessionOptions(), *this,
                                           sockmap_.get(), at_start_));
  std::string greeting;
  std::thread client([&] {
    char buf[64];
    ssize_t n = recv(client_.far.get(), buf, sizeof(buf), 0);
    greeting.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
    client_.far.Reset();
    backend_.far.Reset();
  });
  loop_->Run();
  client.join();
  EXPECT_EQ(greeting, "220 ready\r\n");
  EXPECT_EQ(reason_, CloseReason::kDone);
}

TEST_P(TcpSessionTest, ClientResetResetsBackend) {
  StartSession();
  ASSERT_TRUE(SendAll(client_.far.get(), "partial"));
  ASSERT_TRUE(net::SetLingerZero(client_.far.get()).ok());
  client_.far.Reset();
  loop_->Run();
  EXPECT_EQ(reason_, CloseReason::kClientReset);
  int err = 0;
  RecvToEof(backend_.far.get(), &err);  // may first return "partial"
  EXPECT_EQ(err, ECONNRESET);
}

TEST_P(TcpSessionTest, BackendResetResetsClient) {
  StartSession();
  ASSERT_TRUE(net::SetLingerZero(backend_.far.get()).ok());
  backend_.far.Reset();
  loop_->Run();
  EXPECT_EQ(reason_, CloseReason::kBackendReset);
  int err = 0;
  RecvToEof(client_.far.get(), &err);
  EXPECT_EQ(err, ECONNRESET);
}

TEST_P(TcpSessionTest, ResetAfterHalfCloseIsStillPropagated) {
  StartSession();
  // The client->backend direction finishes first, so no pump reads the client socket again: the
  // RST arrives only as EPOLLERR.
  ASSERT_EQ(shutdown(client_.far.get(), SHUT_WR), 0);
  std::thread backend([&] {
    EXPECT_EQ(RecvToEof(backend_.far.get()), "");  // the forwarded FIN
    ASSERT_TRUE(net::SetLingerZero(client_.far.get()).ok());
    client_.far.Reset();
  });
  loop_->Run();
  backend.join();
  EXPECT_EQ(reason_, CloseReason::kClientReset);
  // recv(2) would return 0: after a FIN, tcp_recvmsg reports EOF (SOCK_DONE) before sk_err. And
  // a RST in CLOSE_WAIT sets EPIPE, not ECONNRESET (tcp_reset()); a FIN would set nothing.
  EXPECT_EQ(net::SocketError(backend_.far.get()), EPIPE);
}

TEST_P(TcpSessionTest, IdleTimeoutResetsBothSides) {
  StartSession(absl::Milliseconds(50));
  // Traffic at the start moves the deadline: the timer re-arms for the remainder first.
  ASSERT_TRUE(SendAll(client_.far.get(), "hello"));
  const absl::Time start = absl::Now();
  loop_->Run();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_EQ(reason_, CloseReason::kIdleTimeout);
  EXPECT_EQ(to_backend_, 5u);
  int err = 0;
  EXPECT_EQ(RecvToEof(backend_.far.get(), &err), "hello");
  EXPECT_EQ(err, ECONNRESET);
  RecvToEof(client_.far.get(), &err);
  EXPECT_EQ(err, ECONNRESET);
}

TEST_P(TcpSessionTest, PipeGoesBackToThePoolOnlyWhenEmpty) {
  if (GetParam() != Mode::kSplice) {
    GTEST_SKIP() << "only splice uses pipes";
  }
  StartSession();
  // The client never reads: its receive queue fills, then the backend->client pipe holds bytes.
  const std::string flood = RandomBytes(8 << 20, 3);
  std::thread backend([&] { SendAll(backend_.far.get(), flood); });  // fails once reset
  // A pump holds a pipe between events only while bytes are in it.
  std::unique_ptr<event::Timer> check;
  check = loop_->CreateTimer([&] {
    if (pool_.created() > 0 && pool_.idle() == 0) {
      session_->Abort();
    } else {
      check->Arm(absl::Milliseconds(1));
    }
  });
  check->Arm(absl::Milliseconds(1));
  loop_->Run();
  backend.join();
  check.reset();
  EXPECT_EQ(reason_, CloseReason::kAborted);
  EXPECT_EQ(pool_.closed_non_empty(), 1u);
  EXPECT_EQ(pool_.idle(), pool_.created() - 1);
}

// The sockmap path's own rules; the other modes skip these.
class SockmapSessionTest : public TcpSessionTest {
 protected:
  void SetUp() override {
    TcpSessionTest::SetUp();
    if (!IsSkipped() && GetParam() != Mode::kSockmap) {
      GTEST_SKIP() << "sockmap only";
    }
  }
  void Exchange(const std::string& first, absl::AnyInvocable<void()> between,
                const std::string& big);
  TcpSession::Path PathNow();
};

INSTANTIATE_TEST_SUITE_P(Sockmap, SockmapSessionTest, ::testing::Values(Mode::kSockmap),
                         [](const auto&) { return std::string("sockmap"); });

TEST(SockmapPromotionTest, QuietMeansUnderTheRateOverTheWindow) {
  const SockmapPromotion p{.max_rate = 1000};  // bytes per second
  EXPECT_TRUE(p.Quiet(49, absl::Milliseconds(50)));
  EXPECT_FALSE(p.Quiet(50, absl::Milliseconds(50)));
  EXPECT_TRUE(p.Quiet(0, absl::Milliseconds(1)));
  EXPECT_FALSE(SockmapPromotion{.max_rate = 0}.Quiet(0, absl::Seconds(1)));
}

// Runs `big` from the client to the backend in 64 KiB bursts, as a request/response protocol
// would (between them the pump empties the socket, the only point where a direction may be
// handed to the kernel mid-stream), after `first` and `between`.
void SockmapSessionTest::Exchange(const std::string& first, absl::AnyInvocable<void()> between,
                                  const std::string& big) {
  std::string at_backend, at_client;
  std::thread backend([&] {
    at_backend = RecvToEof(backend_.far.get());
    EXPECT_TRUE(SendAll(backend_.far.get(), "bye"));
    backend_.far.Reset();
  });
  std::thread client([&] {
    EXPECT_TRUE(SendAll(client_.far.get(), first));
    between();
    for (size_t off = 0; off < big.size(); off += 64 << 10) {
      EXPECT_TRUE(SendAll(client_.far.get(), big.substr(off, 64 << 10)));
      absl::SleepFor(absl::Milliseconds(1));
    }
    shutdown(client_.far.get(), SHUT_WR);
    at_client = RecvToEof(client_.far.get());
  });
  loop_->Run();
  client.join();
  backend.join();
  EXPECT_EQ(reason_, CloseReason::kDone);
  EXPECT_TRUE(at_backend == first + big) << at_backend.size();
  EXPECT_EQ(at_client, "bye");
  EXPECT_EQ(to_backend_, first.size() + big.size());
}

// The session's path, read on the loop's thread.
TcpSession::Path SockmapSessionTest::PathNow() {
  TcpSession::Path path = TcpSession::Path::kCopy;
  absl::Notification read;
  loop_->Post([&] {
    path = session_->path();
    read.Notify();
  });
  read.WaitForNotification();
  return path;
}

TEST_P(SockmapSessionTest, QuietConnectionMovesToTheKernel) {
  sockmap_->promotion = {.age = absl::Milliseconds(1),
                         .recheck = absl::Milliseconds(1),
                         .max_rate = uint64_t{1} << 50};
  at_start_ = false;
  StartSession();
  Exchange(
      RandomBytes(1000, 1),
      [&] {
        const absl::Time deadline = absl::Now() + absl::Seconds(10);
        while (PathNow() != TcpSession::Path::kSockmap && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        EXPECT_EQ(PathNow(), TcpSession::Path::kSockmap);
      },
      RandomBytes(4 << 20, 2));
  EXPECT_EQ(path_, TcpSession::Path::kSockmap);
  // Some of the bursts went through the verdict. How much is up to when the pump first finds
  // the socket empty, which a loaded machine can delay by many bursts.
  EXPECT_GT(kernel_to_backend_, 0u);
}

TEST_P(SockmapSessionTest, BusyConnectionStaysOnSplice) {
  // Every window is over the rate, however slow the machine: the timer looks again and again
  // and never enrols.
  sockmap_->promotion = {
      .age = absl::Milliseconds(1), .recheck = absl::Milliseconds(1), .max_rate = 0};
  at_start_ = false;
  StartSession();
  Exchange(
      RandomBytes(1000, 1), [] { absl::SleepFor(absl::Milliseconds(20)); },
      RandomBytes(4 << 20, 2));
  EXPECT_EQ(path_, TcpSession::Path::kSplice);
  EXPECT_EQ(kernel_to_backend_, 0u);
  EXPECT_EQ(kernel_to_client_, 0u);
}

TEST_P(SockmapSessionTest, ClientThatAlreadySentFinStaysOnSplice) {
  client_ = MakeTcpPair(false);
  backend_ = MakeTcpPair(true);
  ASSERT_TRUE(SendAll(client_.far.get(), "GET / HTTP/1.0\r\n\r\n"));
  ASSERT_EQ(shutdown(client_.far.get(), SHUT_WR), 0);
  pollfd fin{.fd = client_.near.get(), .events = POLLRDHUP, .revents = 0};
  ASSERT_EQ(poll(&fin, 1, 5000), 1);  // the FIN has arrived: the socket is CLOSE_WAIT
  session_ = std::move(*TcpSession::Create(*loop_, pool_, std::move(client_.near),
                                           std::move(backend_.near), SessionOptions(), *this,
                                           sockmap_.get(), at_start_));
  std::string request;
  std::thread backend([&] {
    request = RecvToEof(backend_.far.get());
    EXPECT_TRUE(SendAll(backend_.far.get(), "HTTP/1.0 200 OK\r\n\r\n"));
    backend_.far.Reset();
  });
  std::string reply;
  std::thread client([&] { reply = RecvToEof(client_.far.get()); });
  loop_->Run();
  backend.join();
  client.join();
  EXPECT_EQ(request, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(reply, "HTTP/1.0 200 OK\r\n\r\n");
  EXPECT_EQ(reason_, CloseReason::kDone);
  // Either the session saw the FIN first and never tried, or the kernel refused the socket.
  EXPECT_EQ(path_, TcpSession::Path::kSplice);
  EXPECT_NE(fallback_, fastpath::Fallback::kMapFull);
}

// A backend that stalls: the kernel-pumped direction pauses above the high watermark, resumes
// below the low one, and the client's FIN during a pause hands the rest to the pump.
TEST_P(SockmapSessionTest, SlowBackendPausesResumesAndDrainsOnFin) {
  sockmap_->flow.marks = {.high = 256 << 10, .low = 64 << 10};
  StartSession();
  const std::string data = RandomBytes(24 << 20, 5);
  std::string at_backend;
  std::thread client([&] {
    EXPECT_TRUE(SendAll(client_.far.get(), data));
    EXPECT_EQ(shutdown(client_.far.get(), SHUT_WR), 0);
    RecvToEof(client_.far.get());
  });
  std::thread backend([&] {
    // Stalled until flow control paused the direction: the client surely runs ahead of a
    // backend that does not read (its buffers hold far less than 24 MiB). The deadline only
    // stops a broken pause from hanging the test; the pause count below then fails it.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (sockmap_->flow.pauses.Value() == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    char buf[64 << 10];
    ssize_t n;
    int reads = 0;
    while ((n = recv(backend_.far.get(), buf, sizeof(buf), 0)) > 0) {
      at_backend.append(buf, static_cast<size_t>(n));
      if (++reads < 40) {
        absl::SleepFor(absl::Milliseconds(10));  // 400 ms slow: the client runs ahead
      }
    }
    backend_.far.Reset();
  });
  loop_->Run();
  client.join();
  backend.join();
  EXPECT_EQ(reason_, CloseReason::kDone);
  EXPECT_EQ(at_backend.size(), data.size());
  if (at_backend != data) {
    size_t i = 0;
    while (i < std::min(at_backend.size(), data.size()) && at_backend[i] == data[i]) {
      ++i;
    }
    ADD_FAILURE() << "first difference at byte " << i << " of " << data.size() << "; kernel "
                  << kernel_to_backend_;
  }
  EXPECT_GT(sockmap_->flow.pauses.Value(), 0);
  EXPECT_EQ(sockmap_->flow.paused.Value(), 0);
  EXPECT_GT(kernel_to_backend_, 0u);
}

}  // namespace
}  // namespace sluice::proxy
