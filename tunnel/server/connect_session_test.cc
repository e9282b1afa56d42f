// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/connect_session.h"

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

// The HTTP CONNECT frontend and its sessions on a loop turned by the test with a fake clock,
// with real loopback clients and a FakeAgent behind the Router: no root, no sleeps.
class ConnectSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base::UniqueFd listener = ListenTcp("127.0.0.1", 0).value();  // the frontend's own
    socklen_t len = sizeof(address_);
    ASSERT_EQ(getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address_), &len), 0);
    HttpConnectOptions options;
    options.header_timeout = kHeaderTimeout;
    options.budget = &budget_;
    frontend_ = HttpConnectFrontend::Create(*loop_, std::move(listener), router_, metrics_, options)
                    .value();
  }
  void TearDown() override {
    frontend_.reset();
    Settle();
    router_.RemoveAgent(&agent_);
    Settle();
  }

  // A client whose connect completed (the listener's backlog took it).
  base::UniqueFd Connect() {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
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
