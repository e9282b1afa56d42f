// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/stall_watch.h"

#include <memory>

#include "gtest/gtest.h"
#include "lib/base/clock.h"

namespace sluice::tunnel::wire {
namespace {

constexpr absl::Duration kGrace = ReadGate::kStallGrace;
constexpr absl::Duration kTimeout = absl::Seconds(30);

// An owner as BackendConn is one: it holds the stream while `holding_`, its consumer last
// drained at `drained_`; it lets go on kRelease and closes on kCut.
class StallWatchTest : public ::testing::Test {
 protected:
  void Check() {
    ++checks_;
    switch (watch_.Check(drained_, holding_)) {
      case StallWatch::Verdict::kWait:
        break;
      case StallWatch::Verdict::kRelease:
        holding_ = false;
        ++releases_;
        break;
      case StallWatch::Verdict::kCut:
        ++cuts_;
        break;
    }
  }
  // Turns the loop until nothing is left to do at the current (fake) time.
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    while (loop_->RunOnce(absl::ZeroDuration())) {
    }
  }

  base::FakeClock clock_;
  std::unique_ptr<event::EventLoop> loop_ = event::EventLoop::Create(clock_).value();
  StallWatch watch_{*loop_, kTimeout, [this] { Check(); }};
  bool holding_ = true;
  base::MonoTime drained_ = loop_->MonotonicNow();
  int checks_ = 0;
  int releases_ = 0;
  int cuts_ = 0;
};

TEST_F(StallWatchTest, PausedConsumerLetsGoAtTheGraceAndIsCutAtTheTimeout) {
  Advance(absl::Seconds(10));  // last drained long ago: the hold's start is what counts
  watch_.Start();
  Check();
  EXPECT_TRUE(watch_.watching());
  Advance(kGrace - absl::Milliseconds(1));
  EXPECT_EQ(releases_, 0);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(releases_, 1);  // the shared stream moves again; the connection stays
  EXPECT_EQ(cuts_, 0);
  EXPECT_FALSE(watch_.MayHold(drained_));  // no new hold until the consumer takes bytes
  Advance(kTimeout - kGrace - absl::Milliseconds(1));
  EXPECT_EQ(cuts_, 0);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(cuts_, 1);
  EXPECT_FALSE(watch_.watching());
  EXPECT_EQ(checks_, 3);  // the first, at the grace, at the timeout: no polling in between
}

TEST_F(StallWatchTest, DrainingMovesTheDeadlinesAndAllowsAHoldAgain) {
  watch_.Start();
  Check();
  Advance(kGrace / 2);
  drained_ = loop_->MonotonicNow();  // the consumer took bytes halfway
  Advance(kGrace / 2);
  EXPECT_EQ(releases_, 0);  // the check at the old deadline re-armed at the new one
  Advance(kGrace / 2);
  EXPECT_EQ(releases_, 1);
  Advance(absl::Seconds(20));
  drained_ = loop_->MonotonicNow();  // a paused reader comes back before the timeout
  EXPECT_TRUE(watch_.MayHold(drained_));
  Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_EQ(cuts_, 0);
  // The check due at the old deadline ran late (the clock jumped past it) and looks again no
  // sooner than kRecheck later.
  Advance(StallWatch::kRecheck);
  EXPECT_EQ(cuts_, 1);  // then took nothing for the whole timeout again
}

TEST_F(StallWatchTest, StopEndsTheChecks) {
  watch_.Start();
  Check();
  watch_.Stop();  // drained: the hold is released
  Advance(kTimeout * 3);
  EXPECT_EQ(checks_, 1);
  EXPECT_EQ(releases_ + cuts_, 0);
}

// A timeout below the grace cuts at the grace: there is no release first.
TEST_F(StallWatchTest, TimeoutShorterThanTheGraceCutsAtTheGrace) {
  StallWatch short_watch(*loop_, absl::Milliseconds(10), [] {});
  short_watch.Start();
  EXPECT_EQ(short_watch.Check(drained_, true), StallWatch::Verdict::kWait);
  Advance(kGrace);
  EXPECT_EQ(short_watch.Check(drained_, true), StallWatch::Verdict::kCut);
}

// ConnectSession passes "now" as the drain time while nothing is queued toward its client (the
// hold is the loop's backlog): that never stalls, however long it lasts.
TEST_F(StallWatchTest, NothingQueuedNeverStalls) {
  watch_.Start();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(watch_.Check(loop_->MonotonicNow(), true), StallWatch::Verdict::kWait);
    clock_.Advance(kTimeout);
  }
}

}  // namespace
}  // namespace sluice::tunnel::wire
