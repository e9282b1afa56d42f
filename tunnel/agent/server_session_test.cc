// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/server_session.h"

#include <netinet/in.h>
#include <sys/socket.h>

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

// A backend that accepts bytes but never reads them: once its queue holds the stream, it has
// kStallGrace (on the loop's clock) to drain before it is closed, alone.
TEST_F(ServerSessionTest, BackendThatNeverReadsIsClosedAfterTheGrace) {
  Listener backend;  // never accepts: the connection and its bytes sit in the backlog
  policy_.max_queued = 64 << 10;
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
  for (int i = 0; i < 1000 && reading; ++i) {
    session->Post(wire::MakeData(id, std::string(8 << 10, 'x')));
    RunUntilIdle();
    reading = false;
    gate->ReadNext();
  }
  ASSERT_FALSE(reading) << "the backend's socket buffers never filled";
  clock_.Advance(wire::ReadGate::kStallGrace - absl::Milliseconds(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 1u);
  clock_.Advance(absl::Milliseconds(1));
  RunUntilIdle();
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_EQ(sent_[1].type(), CLOSE_RSP);
  EXPECT_EQ(sent_[1].closeresponse().connectid(), id);
  EXPECT_EQ(sent_[1].closeresponse().error(), "backend stopped reading");
  EXPECT_TRUE(reading);  // the hold went with the connection
  loop_->Post([session] { session->Teardown(); });
  RunUntilIdle();
}

}  // namespace
}  // namespace sluice::tunnel::agent
