// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/socket_pump.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "gtest/gtest.h"
#include "lib/event/loop_thread.h"

namespace sluice::tunnel::wire {
namespace {

class Recorder final : public SocketPump::Callbacks {
 public:
  void OnSocketData(std::string bytes) override { data += bytes; }
  void OnSocketDone(absl::Status reason) override { done.set_value(reason); }
  std::string data;
  std::promise<absl::Status> done;
};

struct Pair {
  base::UniqueFd a, b;
};

Pair SocketPair() {
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
}

// Waits until fd has something to read (or its end); the timeout only catches a hang.
bool WaitReadable(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 10000) == 1;
}

template <typename Fn>
void OnLoop(event::EventLoop& loop, Fn fn) {
  std::promise<void> p;
  loop.Post([&] {
    fn();
    p.set_value();
  });
  p.get_future().wait();
}

TEST(SocketPumpTest, ReadsUntilEofAndWritesQueued) {
  auto thread = event::LoopThread::Create("test").value();
  event::EventLoop* loop = &thread->loop();
  Pair pair = SocketPair();
  Recorder rec;
  std::unique_ptr<SocketPump> pump;
  OnLoop(*loop, [&] {
    pump = SocketPump::Create(*loop, std::move(pair.a), rec, 1024).value();
    EXPECT_TRUE(pump->Write("hello"));
    EXPECT_FALSE(pump->Write(std::string(2000, 'x')));  // over the bound: refused
  });
  char buf[16];
  ASSERT_TRUE(WaitReadable(pair.b.get()));
  ASSERT_EQ(read(pair.b.get(), buf, sizeof(buf)), 5);
  ASSERT_EQ(write(pair.b.get(), "abc", 3), 3);
  pair.b.Reset();
  EXPECT_TRUE(rec.done.get_future().get().ok());
  OnLoop(*loop, [&] {
    EXPECT_EQ(rec.data, "abc");
    pump.reset();
  });
}

TEST(SocketPumpTest, CloseAfterFlushDeliversQueuedBytes) {
  auto thread = event::LoopThread::Create("test").value();
  event::EventLoop* loop = &thread->loop();
  Pair pair = SocketPair();
  Recorder rec;
  std::unique_ptr<SocketPump> pump;
  OnLoop(*loop, [&] {
    pump = SocketPump::Create(*loop, std::move(pair.a), rec, 1 << 20).value();
    pump->SetReading(false);
    EXPECT_TRUE(pump->Write(std::string(300000, 'y')));  // more than the socket buffer
    pump->CloseAfterFlush();
  });
  std::string got;
  char buf[65536];
  while (true) {
    ssize_t n = read(pair.b.get(), buf, sizeof(buf));
    if (n == 0) {
      break;
    }
    if (n > 0) {
      got.append(buf, static_cast<size_t>(n));
    } else {
      ASSERT_TRUE(WaitReadable(pair.b.get())) << got.size();
    }
  }
  EXPECT_EQ(got.size(), 300000u);
  EXPECT_TRUE(rec.done.get_future().get().ok());
  OnLoop(*loop, [&] { pump.reset(); });
}

// Found by the server_session fuzzer: an empty chunk stayed at the head of the queue, so
// nothing after it was sent and EPOLLOUT woke the loop forever.
TEST(SocketPumpTest, EmptyWriteIsANoOp) {
  auto loop = event::EventLoop::Create().value();
  Pair pair = SocketPair();
  Recorder rec;
  auto pump = SocketPump::Create(*loop, std::move(pair.a), rec, 1024).value();
  EXPECT_TRUE(pump->Write(""));
  EXPECT_TRUE(pump->Write("hi"));
  EXPECT_FALSE(loop->RunOnce(absl::ZeroDuration()));  // nothing left to do: idle
  char buf[4];
  EXPECT_EQ(read(pair.b.get(), buf, sizeof(buf)), 2);
  pump.reset();
}

}  // namespace
}  // namespace sluice::tunnel::wire
