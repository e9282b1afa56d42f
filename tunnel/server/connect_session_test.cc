// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/connect_session.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/event/event_loop.h"

#include "tests/testutil/fd_exhaustion.h"
#include "tunnel/server/fake_agent.h"
#include "tunnel/server/http_connect.h"
#include "tunnel/server/listen.h"

namespace sluice::tunnel::server {
namespace {

constexpr absl::Duration kHeaderTimeout = absl::Seconds(5);
constexpr absl::Duration kStallTimeout = absl::Seconds(30);
constexpr size_t kMaxQueued = 1 << 20;

// The HTTP CONNECT frontend and its sessions on a loop turned by the test with a fake clock,
// with real loopback clients and a FakeAgent behind the Router: no root, no sleeps.
class ConnectSessionTest : public ::testing::Test {
 protected:
  void SetUp() override { StartFrontend(&budget_); }
  // Replaces the frontend (SetUp's has the tiny byte budget).
  void StartFrontend(wire::ByteBudget* budget) {
    frontend_.reset();
    Settle();
    base::UniqueFd listener = ListenTcp("127.0.0.1", 0).value();  // the frontend's own
    socklen_t len = sizeof(address_);
    ASSERT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address_), &len), 0);
    HttpConnectOptions options;
    options.header_timeout = kHeaderTimeout;
    options.max_queued = kMaxQueued;
    options.stall_timeout = kStallTimeout;
    options.budget = budget;
    frontend_ = HttpConnectFrontend::Create(*loop_, std::move(listener), router_, metrics_, options)
                    .value();
  }
  void TearDown() override {
    frontend_.reset();
    Settle();
    router_.RemoveAgent(&agent_);
    Settle();
  }

  // A client whose connect completed (the listener's backlog took it). A small receive buffer
  // (fixed, no autotuning) makes a client that does not read fill up after a few KiB.
  base::UniqueFd Connect(bool small_buffer = false) {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (small_buffer) {
      const int size = 4096;
      EXPECT_EQ(setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
    }
    EXPECT_EQ(connect(fd.get(), reinterpret_cast<const sockaddr*>(&address_), sizeof(address_)), 0);
    return fd;
  }
  static void Send(int fd, const std::string& bytes) {
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  // What the client can read now without waiting; "" and *eof on end of stream.
  static std::string ReadNow(int fd, bool* eof = nullptr) {
    std::string got;
    char buf[4096];
    while (true) {
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 0) != 1) {
        return got;
      }
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) {
        if (eof != nullptr) {
          *eof = true;
        }
        return got;
      }
      got.append(buf, static_cast<size_t>(n));
    }
  }
  // Turns the loop until nothing is left to do at the current (fake) time.
  void Settle() {
    for (int turn = 0; turn < 1000 && loop_->RunOnce(absl::ZeroDuration()); ++turn) {
    }
  }
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    Settle();
  }

  // Established through the FakeAgent as connect ID 7, the 200 read.
  base::UniqueFd Establish(bool small_buffer) {
    EXPECT_TRUE(router_.AddAgent(&agent_).ok());
    base::UniqueFd client = Connect(small_buffer);
    Send(client.get(), "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n");
    Settle();
    EXPECT_EQ(agent_.sent.size(), 1u);
    EXPECT_TRUE(router_.OnAgentPacket(
        &agent_, wire::MakeDialResponse(agent_.sent[0].dialrequest().random(), 7, "")));
    Settle();
    EXPECT_EQ(ReadNow(client.get()), "HTTP/1.1 200 Connection Established\r\n\r\n");
    return client;
  }

  wire::ByteBudget budget_{4};  // bytes: spent by any DATA
  base::FakeClock clock_;
  std::unique_ptr<event::EventLoop> loop_ = event::EventLoop::Create(clock_).value();
  base::Registry registry_;
  ServerMetrics metrics_{registry_};
  Router router_{{Strategy::kDefault}, metrics_};
  FakeAgent agent_{"agent"};
  sockaddr_in address_{};
  std::unique_ptr<HttpConnectFrontend> frontend_;
};

TEST_F(ConnectSessionTest, IncompleteHeadTimesOutWith408OnTheLoopClock) {
  base::UniqueFd client = Connect();
  Send(client.get(), "CONNECT 10.0.0.1:443 HTTP/1.1\r\n");  // no blank line yet
  Settle();
  Advance(kHeaderTimeout - absl::Milliseconds(1));
  EXPECT_EQ(ReadNow(client.get()), "");
  Advance(absl::Milliseconds(1));
  bool eof = false;
  const std::string reply = ReadNow(client.get(), &eof);
  EXPECT_EQ(reply.rfind("HTTP/1.1 408 Request Timeout\r\n", 0), 0u) << reply;
  if (!eof) {
    Settle();
    EXPECT_EQ(ReadNow(client.get(), &eof), "");
  }
  EXPECT_TRUE(eof);  // closed once the reply was flushed
}

TEST_F(ConnectSessionTest, WrongMethodIs405) {
  base::UniqueFd client = Connect();
  Send(client.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  Settle();
  const std::string reply = ReadNow(client.get());
  EXPECT_EQ(reply.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << reply;
}

TEST_F(ConnectSessionTest, NoAgentIs500) {
  base::UniqueFd client = Connect();
  Send(client.get(), "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n");
  Settle();
  const std::string reply = ReadNow(client.get());
  EXPECT_EQ(reply.rfind("HTTP/1.1 500 Internal Server Error\r\n", 0), 0u) << reply;
}

// The head is parsed, the dial goes to the agent, and its answer opens the tunnel; bytes sent
// after the head travel with the first DATA. The head's deadline no longer applies.
TEST_F(ConnectSessionTest, DialThroughTheAgentThenRelay) {
  ASSERT_TRUE(router_.AddAgent(&agent_).ok());
  base::UniqueFd client = Connect();
  Send(client.get(), "CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\nearly");
  Settle();
  ASSERT_EQ(agent_.sent.size(), 1u);
  ASSERT_EQ(agent_.sent[0].type(), DIAL_REQ);
  EXPECT_EQ(agent_.sent[0].dialrequest().address(), "10.0.0.1:443");
  EXPECT_EQ(ReadNow(client.get()), "");  // nothing until the agent answers
  ASSERT_TRUE(router_.OnAgentPacket(
      &agent_, wire::MakeDialResponse(agent_.sent[0].dialrequest().random(), 7, "")));
  Settle();
  EXPECT_EQ(ReadNow(client.get()), "HTTP/1.1 200 Connection Established\r\n\r\n");
  ASSERT_EQ(agent_.sent.size(), 2u);
  EXPECT_EQ(agent_.sent[1].type(), DATA);
  EXPECT_EQ(agent_.sent[1].data().connectid(), 7);
  EXPECT_EQ(agent_.sent[1].data().data(), "early");

  ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeData(7, "from backend")));
  Settle();
  EXPECT_EQ(ReadNow(client.get()), "from backend");

  Advance(kHeaderTimeout * 2);
  bool eof = false;
  EXPECT_EQ(ReadNow(client.get(), &eof), "");
  EXPECT_FALSE(eof);  // established: no deadline ends it
}

// Past the server-wide byte budget a connection pauses the agent stream until it has written,
// however little it holds itself; nothing is closed, and what it charged is released.
TEST_F(ConnectSessionTest, SpentByteBudgetPausesTheAgentStreamUntilWritten) {
  int reads = 0;
  agent_.read_gate = std::make_shared<wire::ReadGate>([&reads] { ++reads; });
  ASSERT_TRUE(router_.AddAgent(&agent_).ok());
  base::UniqueFd client = Connect();
  Send(client.get(), "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n");
  Settle();
  ASSERT_EQ(agent_.sent.size(), 1u);
  ASSERT_TRUE(router_.OnAgentPacket(
      &agent_, wire::MakeDialResponse(agent_.sent[0].dialrequest().random(), 7, "")));
  Settle();
  EXPECT_EQ(ReadNow(client.get()), "HTTP/1.1 200 Connection Established\r\n\r\n");

  ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeData(7, "0123456789")));
  EXPECT_EQ(budget_.used(), 10u);
  agent_.read_gate->ReadNext();  // the agent stream's next read waits
  EXPECT_EQ(reads, 0);
  EXPECT_EQ(metrics_.limited.WithLabels({"byte_budget"}).Value(), 1);
  Settle();  // the loop writes the bytes to the client: the stream reads again
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(ReadNow(client.get()), "0123456789");
  EXPECT_EQ(budget_.used(), 0u);
}

// Behind an agent without the window extension, a client that reads nothing holds the agent
// stream only for the grace, then lets go (the others move on) and keeps its tunnel; only
// after --stall-timeout is it cut, counted and alone.
TEST_F(ConnectSessionTest, PausedClientLetsGoOfTheStreamThenIsCutAtTheStallTimeout) {
  StartFrontend(nullptr);
  int reads = 0;
  agent_.read_gate = std::make_shared<wire::ReadGate>([&reads] { ++reads; });
  base::UniqueFd client = Establish(/*small_buffer=*/true);
  // As AgentStream reads: each packet, then the next read unless the gate holds it.
  for (int i = 0; i < 512 && reads == i; ++i) {
    ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeData(7, std::string(16 << 10, 'x'))));
    Settle();
    agent_.read_gate->ReadNext();
  }
  const int held_at = reads;
  ASSERT_LT(held_at, 512) << "the client's socket buffers never filled";
  Advance(wire::ReadGate::kStallGrace - absl::Milliseconds(1));
  EXPECT_EQ(reads, held_at);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(reads, held_at + 1);  // released: the stream reads again
  // More for it queues without holding again: the client has taken nothing since.
  ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeData(7, std::string(16 << 10, 'y'))));
  Settle();
  agent_.read_gate->ReadNext();
  EXPECT_EQ(reads, held_at + 2);
  Advance(kStallTimeout - wire::ReadGate::kStallGrace - absl::Milliseconds(1));
  EXPECT_EQ(metrics_.stall_closes.Value(), 0);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(metrics_.stall_closes.Value(), 1);
  EXPECT_EQ(metrics_.overflow_closes.Value(), 0);
  EXPECT_EQ(agent_.sent.back().type(), CLOSE_REQ);  // the agent is told
}

// Behind a windowed agent, a client that reads nothing for as long as it likes keeps its
// tunnel and holds nothing: the agent sends no more than our window. What the client takes
// once it reads again is granted back, and the client's own sending waits for the agent's
// credit.
TEST_F(ConnectSessionTest, WindowedClientPausesOnlyItself) {
  StartFrontend(nullptr);
  int reads = 0;
  agent_.read_gate = std::make_shared<wire::ReadGate>([&reads] { ++reads; });
  agent_.window = wire::kMinWindow;
  base::UniqueFd client = Establish(/*small_buffer=*/true);
  const int64_t window = wire::WindowFor(kMaxQueued);  // ours, what the agent may send
  for (int64_t off = 0; off < window; off += 16 << 10) {
    ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeData(7, std::string(16 << 10, 'x'))));
    Settle();
    const int before = reads;
    agent_.read_gate->ReadNext();
    ASSERT_EQ(reads, before + 1) << "a windowed connection held the agent stream";
  }
  Advance(absl::Minutes(30));
  bool eof = false;
  int64_t taken = static_cast<int64_t>(ReadNow(client.get(), &eof).size());
  EXPECT_FALSE(eof);
  EXPECT_EQ(metrics_.stall_closes.Value() + metrics_.overflow_closes.Value(), 0);
  for (int i = 0; i < 10000 && taken < window && !eof; ++i) {
    Settle();
    taken += static_cast<int64_t>(ReadNow(client.get(), &eof).size());
  }
  ASSERT_EQ(taken, window);
  int64_t granted = 0;
  for (const wire::Packet& p : agent_.sent) {
    if (p.type() == SLUICE_CREDIT) {
      EXPECT_EQ(p.credit().connectid(), 7);
      granted += p.credit().bytes();
    }
  }
  EXPECT_EQ(granted, window);

  // Upload: the agent's credit (kMinWindow) bounds what is read from the client, give or take
  // one read.
  auto uploaded = [&] {
    int64_t n = 0;
    for (const wire::Packet& p : agent_.sent) {
      if (p.type() == DATA) {
        n += static_cast<int64_t>(p.data().data().size());
      }
    }
    return n;
  };
  ASSERT_EQ(fcntl(client.get(), F_SETFL, O_NONBLOCK), 0);
  const std::string payload(3 * wire::kMinWindow, 'u');
  size_t sent = 0;
  auto turn = [&] {
    if (sent < payload.size()) {
      const ssize_t n = write(client.get(), payload.data() + sent, payload.size() - sent);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      }
    }
    Settle();
  };
  for (int i = 0; i < 200; ++i) {
    turn();
  }
  EXPECT_GE(uploaded(), wire::kMinWindow);
  EXPECT_LE(uploaded(), wire::kMinWindow + static_cast<int64_t>(wire::kReadChunk));
  ASSERT_TRUE(router_.OnAgentPacket(&agent_, wire::MakeCredit(7, 3 * wire::kMinWindow)));
  for (int i = 0; i < 1000 && uploaded() < static_cast<int64_t>(payload.size()); ++i) {
    turn();
  }
  EXPECT_EQ(uploaded(), static_cast<int64_t>(payload.size()));
}

// Out of descriptors, the frontend stops watching its listener for a while instead of being
// woken for the same queued connection on every turn (a busy loop), then takes it.
TEST_F(ConnectSessionTest, OutOfDescriptorsPausesAcceptingThenServes) {
  base::UniqueFd client = Connect();
  Send(client.get(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  {
    testutil::FdExhaustion exhausted;
    ASSERT_TRUE(exhausted.exhausted());
    EXPECT_TRUE(loop_->RunOnce(absl::ZeroDuration()));  // accept4 fails: EMFILE
    for (int turn = 0; turn < 3; ++turn) {
      EXPECT_FALSE(loop_->RunOnce(absl::ZeroDuration())) << "the listener is polled again";
    }
  }
  Advance(absl::Seconds(1));
  const std::string reply = ReadNow(client.get());
  EXPECT_EQ(reply.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0), 0u) << reply;
}

}  // namespace
}  // namespace sluice::tunnel::server
