// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/shutdown.h"

#include <signal.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "lib/base/clock.h"

namespace sluice::cli {
namespace {

// Signals sent to this process stay pending (blocked in its only thread) until the code under
// test takes them, so each test queues them first and nothing races.
class ShutdownTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { BlockShutdownSignals(); }
  static void Send(int signo) { ASSERT_EQ(kill(getpid(), signo), 0); }
  static bool Pending(int signo) {
    sigset_t pending;
    sigpending(&pending);
    return sigismember(&pending, signo) == 1;
  }
  // Runs the loop until `done` or a generous deadline.
  template <typename Done>
  static void RunUntil(event::EventLoop& loop, Done done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!done() && absl::Now() < deadline) {
      loop.RunOnce(absl::Milliseconds(100));
    }
  }
};

TEST_F(ShutdownTest, NoDrainStopsAtTheFirstSignal) {
  Send(SIGINT);
  std::vector<int> seen;
  AwaitShutdown([&](int signo) {
    seen.push_back(signo);
    return absl::ZeroDuration();
  });
  EXPECT_EQ(seen, std::vector<int>{SIGINT});
}

TEST_F(ShutdownTest, DrainEndsWhenDrainedWithoutAnotherSignal) {
  Send(SIGTERM);
  int polls = 0;
  AwaitShutdown([](int) { return absl::Hours(1); }, [&] { return ++polls >= 3; });
  EXPECT_EQ(polls, 3);
}

TEST_F(ShutdownTest, EndlessDrainEndsAtTheNextSignal) {
  Send(SIGTERM);
  Send(SIGINT);
  int drains = 0;
  AwaitShutdown([&](int) {
    ++drains;
    return absl::InfiniteDuration();
  });
  EXPECT_EQ(drains, 1);
  // Both signals were taken: none is left pending for the next test.
  EXPECT_FALSE(Pending(SIGTERM));
  EXPECT_FALSE(Pending(SIGINT));
}

TEST_F(ShutdownTest, DrainPeriodEnds) {
  Send(SIGTERM);
  AwaitShutdown([](int) { return absl::Milliseconds(1); });  // returns: the period ended
}

TEST_F(ShutdownTest, LoopSequence) {
  auto loop = event::EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  int stops = 0;
  std::vector<int> drains;
  auto shutdown = LoopShutdown::Create(
      **loop,
      [&](int signo) {
        drains.push_back(signo);
        return absl::InfiniteDuration();
      },
      [&] { ++stops; });
  ASSERT_TRUE(shutdown.ok()) << shutdown.status();
  // The first signal drains and keeps serving; the second stops.
  Send(SIGTERM);
  RunUntil(**loop, [&] { return !drains.empty(); });
  EXPECT_EQ(drains, std::vector<int>{SIGTERM});
  EXPECT_EQ(stops, 0);
  Send(SIGINT);
  RunUntil(**loop, [&] { return stops > 0; });
  EXPECT_EQ(stops, 1);
  // A later signal is taken, and stops nothing twice.
  Send(SIGTERM);
  RunUntil(**loop, [&] { return !Pending(SIGTERM); });
  EXPECT_EQ(stops, 1);
  EXPECT_EQ(drains.size(), 1u);
}

TEST_F(ShutdownTest, LoopDrainPeriodEndsWithStop) {
  base::FakeClock clock;
  auto loop = event::EventLoop::Create(clock);
  ASSERT_TRUE(loop.ok());
  int stops = 0;
  auto shutdown = LoopShutdown::Create(
      **loop, [](int) { return absl::Seconds(10); }, [&] { ++stops; });
  ASSERT_TRUE(shutdown.ok());
  Send(SIGTERM);
  RunUntil(**loop, [&] { return !Pending(SIGTERM); });
  // Serving goes on until the period is over on the loop's clock, then it stops.
  clock.Advance(absl::Seconds(9));
  (*loop)->RunOnce(absl::ZeroDuration());
  EXPECT_EQ(stops, 0);
  clock.Advance(absl::Seconds(2));
  RunUntil(**loop, [&] { return stops > 0; });
  EXPECT_EQ(stops, 1);
}

}  // namespace
}  // namespace sluice::cli
