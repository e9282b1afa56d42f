// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/server_session.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/base/unique_fd.h"

#include "tunnel/agent/fake_resolver.h"

namespace sluice::tunnel::agent {
namespace {

// A listening loopback socket: connects to it complete at once (the backlog accepts them).
struct Listener {
  Listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(listen(fd.get(), 16), 0);
    EXPECT_EQ(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  base::UniqueFd fd{socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  std::string address;
};

// One session on a loop turned by the test; what it writes to the stream is kept in `sent`.
class ServerSessionTest : public ::testing::Test {
 protected:
  ~ServerSessionTest() override {
    loop_->Post([s = session_] { s->Teardown(); });
    RunUntilIdle();
  }

  void RunUntilIdle() {
    for (int turn = 0; turn < 1000; ++turn) {
      bool progress = loop_->RunOnce(absl::ZeroDuration());
      while (const wire::Packet* p = std::exchange(in_flight_, nullptr)) {
        sent_.push_back(*p);
        (void)outbox_->OnWriteDone(true);
        progress = true;
      }
      if (!progress) {
        return;
      }
    }
    ADD_FAILURE() << "the loop never went idle";
  }

  base::FakeClock clock_;  // deadlines move only when the test says
  std::unique_ptr<event::EventLoop> loop_ = event::EventLoop::Create(clock_).value();
  base::Registry registry_;
  AgentMetrics metrics_{registry_};
  FakeResolver resolver_;
  DialPolicy policy_;
  const wire::Packet* in_flight_ = nullptr;
  std::vector<wire::Packet> sent_;
  std::shared_ptr<StreamOutbox> outbox_ =
      std::make_shared<StreamOutbox>([this](const wire::Packet* p) { in_flight_ = p; });
  std::shared_ptr<ServerSession> session_ =
      std::make_shared<ServerSession>(*loop_, resolver_, metrics_, policy_, outbox_, nullptr);
};

// Found with the server_session fuzzer's protocol checks: the connect completed on the turn after
// DIAL_CLS retired the connection, and the session still answered DIAL_RSP success with a connectID
// it had already dropped.
TEST_F(ServerSessionTest, CancelledDialIsNeverAnswered) {
  Listener backend;
  session_->Post(wire::MakeDialRequest(backend.address, 7));
  session_->Post(wire::MakeCloseDial(7));
  RunUntilIdle();
  EXPECT_TRUE(sent_.empty()) << sent_.front().ShortDebugString();
}

// Found with the server_session fuzzer's protocol checks: CLOSE_REQ naming a connectID still
// dialing was answered with a clean CLOSE_RSP and the dial was dropped, so its DIAL_REQ was never
// answered.
TEST_F(ServerSessionTest, CloseRequestForDialingConnectionIsUnknown) {
  Listener backend;
  session_->Post(wire::MakeDialRequest(backend.address, 5));
  session_->Post(wire::MakeCloseRequest(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[0].type(), CLOSE_RSP);
  EXPECT_EQ(sent_[0].closeresponse().connectid(), 1);
  EXPECT_EQ(sent_[0].closeresponse().error(), "unknown connectID");
  EXPECT_EQ(sent_[1].type(), DIAL_RSP);
  EXPECT_EQ(sent_[1].dialresponse().random(), 5);
  EXPECT_EQ(sent_[1].dialresponse().connectid(), 1);
  EXPECT_EQ(sent_[1].dialresponse().error(), "");
}

// A name whose lookup never returns: only the dial deadline can answer the DIAL_REQ.
class SilentResolver final : public Resolver {
 public:
  void Resolve(std::string, Done done) override { pending_.push_back(std::move(done)); }

 private:
  std::vector<Done> pending_;
};

TEST_F(ServerSessionTest, DialTimesOutOnTheLoopClock) {
  SilentResolver silent;
  policy_.timeout = absl::Seconds(5);
  auto session =
      std::make_shared<ServerSession>(*loop_, silent, metrics_, policy_, outbox_, nullptr);
  session->Post(wire::MakeDialRequest("slow.internal:80", 3));
  RunUntilIdle();
  clock_.Advance(absl::Seconds(5) - absl::Milliseconds(1));
  RunUntilIdle();
  EXPECT_TRUE(sent_.empty());
  clock_.Advance(absl::Milliseconds(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].dialresponse().random(), 3);
  EXPECT_EQ(sent_[0].dialresponse().error(), "dial tcp slow.internal:80: i/o timeout");
  loop_->Post([session] { session->Teardown(); });
  RunUntilIdle();
}

// A backend that accepts bytes but never reads them, behind a server without the window
// extension: once its queue holds the stream, it has kStallGrace (on the loop's clock) to
// drain; then the stream moves on without it (the connection stays, its bytes keep queueing),
// and only after the stall timeout is it closed, alone.
TEST_F(ServerSessionTest, BackendThatNeverReadsLetsGoOfTheStreamThenIsCutAtTheTimeout) {
  Listener backend;              // never accepts: the connection and its bytes sit in the backlog
  policy_.max_queued = 1 << 20;  // holds past 256 KiB, overflows past 1 MiB
  policy_.stall_timeout = absl::Seconds(30);
  bool reading = true;
  auto gate = std::make_shared<wire::ReadGate>([&reading] { reading = true; });
  auto session =
      std::make_shared<ServerSession>(*loop_, resolver_, metrics_, policy_, outbox_, gate);
  session->Post(wire::MakeDialRequest(backend.address, 9));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  const int64_t id = sent_[0].dialresponse().connectid();
  ASSERT_NE(id, 0);
  // As ServerStream reads: each packet, then the next read unless the gate holds it.
  auto feed = [&] {
    for (int i = 0; i < 4000 && reading; ++i) {
      session->Post(wire::MakeData(id, std::string(64 << 10, 'x')));
      RunUntilIdle();
      reading = false;
      gate->ReadNext();
    }
  };
  feed();
  ASSERT_FALSE(reading) << "the backend's socket buffers never filled";
  clock_.Advance(wire::ReadGate::kStallGrace - absl::Milliseconds(1));
  RunUntilIdle();
  EXPECT_FALSE(reading);
  clock_.Advance(absl::Milliseconds(1));
  RunUntilIdle();
  EXPECT_TRUE(reading);  // released: the other connections on the stream move again
  ASSERT_EQ(sent_.size(), 1u);
  // More bytes for it queue without holding the stream again (no progress since).
  session->Post(wire::MakeData(id, std::string(64 << 10, 'y')));
  RunUntilIdle();
  reading = false;
  gate->ReadNext();
  EXPECT_TRUE(reading);
  clock_.Advance(absl::Seconds(30) - wire::ReadGate::kStallGrace - absl::Milliseconds(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  clock_.Advance(absl::Milliseconds(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].type(), CLOSE_RSP);
  EXPECT_EQ(sent_[1].closeresponse().connectid(), id);
  EXPECT_EQ(sent_[1].closeresponse().error(), "backend stopped reading");
  EXPECT_EQ(metrics_.stall_closes.Value(), 1);
  EXPECT_EQ(metrics_.overflow_closes.Value(), 0);
  loop_->Post([session] { session->Teardown(); });
  RunUntilIdle();
}

// Behind a windowed server, a backend that reads nothing for as long as it likes keeps its
// connection, holds nothing and stalls nobody: the server sends no more than our window, and
// what the backend takes once it reads again is granted back.
TEST_F(ServerSessionTest, WindowedBackendPausesOnlyItselfAndGrantsWhatItTakes) {
  Listener backend;
  policy_.max_queued = 16 << 20;
  bool reading = true;
  auto gate = std::make_shared<wire::ReadGate>([&reading] { reading = true; });
  auto session =
      std::make_shared<ServerSession>(*loop_, resolver_, metrics_, policy_, outbox_, gate);
  session->Negotiated(wire::WindowFor(16 << 20));
  session->Post(wire::MakeDialRequest(backend.address, 4));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  const int64_t id = sent_[0].dialresponse().connectid();
  // The server's whole credit: our window, 4 MiB, far more than the socket buffers take.
  const int64_t window = wire::WindowFor(16 << 20);
  for (int64_t off = 0; off < window; off += 256 << 10) {
    session->Post(wire::MakeData(id, std::string(256 << 10, 'z')));
    RunUntilIdle();
    reading = false;
    gate->ReadNext();
    ASSERT_TRUE(reading) << "a windowed connection held the stream";
  }
  clock_.Advance(absl::Minutes(30));  // paused far beyond the grace and any stall timeout
  RunUntilIdle();
  int64_t granted = 0;
  for (const wire::Packet& p : sent_) {
    ASSERT_NE(p.type(), CLOSE_RSP) << p.ShortDebugString();
    if (p.type() == SLUICE_CREDIT) {
      granted += p.credit().bytes();
    }
  }
  // The backend reads: everything it takes comes back as credit, the last bytes included.
  base::UniqueFd conn(accept4(backend.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  ASSERT_TRUE(conn);
  int64_t taken = 0;
  char buf[64 << 10];
  for (int turn = 0; turn < 100000 && taken < window; ++turn) {
    const ssize_t n = read(conn.get(), buf, sizeof(buf));
    if (n > 0) {
      taken += n;
    }
    RunUntilIdle();
  }
  ASSERT_EQ(taken, window);
  granted = 0;
  for (const wire::Packet& p : sent_) {
    if (p.type() == SLUICE_CREDIT) {
      EXPECT_EQ(p.credit().connectid(), id);
      granted += p.credit().bytes();
    }
  }
  EXPECT_EQ(granted, window);
  EXPECT_EQ(metrics_.stall_closes.Value() + metrics_.overflow_closes.Value(), 0);
  loop_->Post([session] { session->Teardown(); });
  RunUntilIdle();
}

// The backend sends more than the server's window: reading it pauses at the credit and a
// SLUICE_CREDIT resumes it.
TEST_F(ServerSessionTest, WindowedSendingWaitsForTheServersCredit) {
  Listener backend;
  session_->Negotiated(wire::kMinWindow);
  session_->Post(wire::MakeDialRequest(backend.address, 2));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  const int64_t id = sent_[0].dialresponse().connectid();
  base::UniqueFd conn(accept4(backend.fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  ASSERT_TRUE(conn);
  const std::string payload(3 * wire::kMinWindow, 'b');
  size_t written = 0;
  // The backend writes what its socket takes; the agent reads while its credit lasts.
  auto turn = [&] {
    if (written < payload.size()) {
      const ssize_t n = write(conn.get(), payload.data() + written, payload.size() - written);
      if (n > 0) {
        written += static_cast<size_t>(n);
      }
    }
    RunUntilIdle();
  };
  auto data_sent = [&] {
    int64_t n = 0;
    for (const wire::Packet& p : sent_) {
      if (p.type() == DATA) {
        n += static_cast<int64_t>(p.data().data().size());
      }
    }
    return n;
  };
  for (int i = 0; i < 200; ++i) {
    turn();
  }
  // One read may overshoot the credit; never a second.
  EXPECT_GE(data_sent(), wire::kMinWindow);
  EXPECT_LE(data_sent(), wire::kMinWindow + static_cast<int64_t>(wire::kReadChunk));
  const int64_t before = data_sent();
  session_->Post(wire::MakeCredit(id, 2 * wire::kMinWindow));
  for (int i = 0; i < 200 && data_sent() < before + wire::kMinWindow; ++i) {
    turn();
  }
  EXPECT_GT(data_sent(), before);
  // A credit for a connection that is gone is no error.
  session_->Post(wire::MakeCredit(id + 100, 1));
  RunUntilIdle();
  EXPECT_EQ(metrics_.bad_packets.WithLabels({"unknown_connect_id"}).Value(), 0);
}

// Without the extension negotiated, a credit is a type this stream does not carry.
TEST_F(ServerSessionTest, CreditWithoutTheExtensionIsUnexpected) {
  session_->Post(wire::MakeCredit(1, 100));
  RunUntilIdle();
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(metrics_.bad_packets.WithLabels({"unexpected_type"}).Value(), 1);
}

}  // namespace
}  // namespace sluice::tunnel::agent
