// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/stall_watch.h"

#include <memory>

#include "gtest/gtest.h"
#include "lib/base/clock.h"

namespace sluice::tunnel::wire {
namespace {

constexpr absl::Duration kGrace = ReadGate::kStallGrace;

// An owner as BackendConn is one: it holds while `holding`, its peer last drained at
// `drained`, and it closes on the first expired check.
class StallWatchTest : public ::testing::Test {
 protected:
  void Check() {
    ++checks_;
    if (holding_ && watch_.Expired(drained_)) {
      watch_.Stop();
      ++stalls_;
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
  StallWatch watch_{*loop_, [this] { Check(); }};
  bool holding_ = true;
  base::MonoTime drained_ = loop_->MonotonicNow();
  int checks_ = 0;
  int stalls_ = 0;
};

TEST_F(StallWatchTest, PeerThatNeverDrainsIsStalledAtTheGraceFromTheHold) {
  Advance(absl::Seconds(10));  // last drained long ago: the hold's start is what counts
  watch_.Start();
  Check();
  EXPECT_TRUE(watch_.watching());
  Advance(kGrace - absl::Milliseconds(1));
  EXPECT_EQ(stalls_, 0);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(stalls_, 1);
  EXPECT_FALSE(watch_.watching());
  EXPECT_EQ(checks_, 2);  // the first, then one at the deadline: no polling in between
}

TEST_F(StallWatchTest, DrainingMovesTheDeadline) {
  watch_.Start();
  Check();
  Advance(kGrace / 2);
  drained_ = loop_->MonotonicNow();  // the peer took bytes halfway
  Advance(kGrace / 2);
  EXPECT_EQ(stalls_, 0);  // the check at the old deadline re-armed at the new one
  Advance(kGrace / 2);
  EXPECT_EQ(stalls_, 1);
}

TEST_F(StallWatchTest, StopEndsTheChecks) {
  watch_.Start();
  Check();
  watch_.Stop();  // drained: the hold is released
  Advance(kGrace * 3);
  EXPECT_EQ(checks_, 1);
  EXPECT_EQ(stalls_, 0);
}

// A deadline that has passed without a close (ConnectSession with nothing queued) is looked at
// again kRecheck later, not at once.
TEST_F(StallWatchTest, PassedDeadlineIsRecheckedAfterAWhile) {
  holding_ = false;  // the timer's checks decline; the test calls Expired itself
  watch_.Start();
  EXPECT_FALSE(watch_.Expired(drained_));
  Advance(kGrace);
  ASSERT_EQ(checks_, 1);
  EXPECT_TRUE(watch_.Expired(drained_));
  Advance(StallWatch::kRecheck - absl::Milliseconds(1));
  EXPECT_EQ(checks_, 1);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(checks_, 2);
  EXPECT_EQ(stalls_, 0);
}

}  // namespace
}  // namespace sluice::tunnel::wire
