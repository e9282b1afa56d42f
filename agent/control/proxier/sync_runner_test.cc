// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/sync_runner.h"

#include <memory>

#include "gtest/gtest.h"
#include "lib/base/clock.h"
#include "lib/event/event_loop.h"

namespace sluice::proxier {
namespace {

constexpr absl::Duration kMin = absl::Seconds(1);
constexpr absl::Duration kMax = absl::Seconds(60);
constexpr absl::Duration kRetry = absl::Seconds(5);

// SyncRunner on a manual loop and a fake clock: every interval is exact and nothing sleeps.
class SyncRunnerTest : public ::testing::Test {
 protected:
  // Turns the loop until it has nothing left to do at the current (fake) time.
  void Settle() {
    while (loop_->RunOnce(absl::ZeroDuration())) {
    }
  }
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    Settle();
  }

  base::FakeClock clock_;
  std::unique_ptr<event::EventLoop> loop_ = event::EventLoop::Create(clock_).value();
  int runs_ = 0;
  absl::StatusOr<bool> result_ = true;  // what the next sync returns
  SyncRunner runner_{*loop_, RunPolicy(kMin, kMax, kRetry), [this]() -> absl::StatusOr<bool> {
                       ++runs_;
                       return result_;
                     }};
};

TEST_F(SyncRunnerTest, FirstRequestRunsAtOnceAndLaterOnesCoalesceWithinMinInterval) {
  Settle();
  EXPECT_EQ(runs_, 0);  // nothing requested, nothing ran yet
  runner_.Request();
  Settle();
  EXPECT_EQ(runs_, 1);
  runner_.Request();
  runner_.Request();
  runner_.Request();
  Advance(kMin - absl::Milliseconds(1));
  EXPECT_EQ(runs_, 1);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(runs_, 2);  // three requests, one run
  Advance(kMin);
  EXPECT_EQ(runs_, 2);  // no request since
}

TEST_F(SyncRunnerTest, RunsEveryMaxIntervalWithoutRequests) {
  runner_.Request();
  Settle();
  ASSERT_EQ(runs_, 1);
  Advance(kMax - absl::Milliseconds(1));
  EXPECT_EQ(runs_, 1);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(runs_, 2);
  Advance(kMax);
  EXPECT_EQ(runs_, 3);
}

TEST_F(SyncRunnerTest, FailedRunIsRetriedAfterRetryInterval) {
  result_ = absl::UnavailableError("apply failed");
  runner_.Request();
  Settle();
  ASSERT_EQ(runs_, 1);
  result_ = true;
  Advance(kRetry - absl::Milliseconds(1));
  EXPECT_EQ(runs_, 1);
  Advance(absl::Milliseconds(1));
  EXPECT_EQ(runs_, 2);
  Advance(kRetry);
  EXPECT_EQ(runs_, 2);  // succeeded: no more retries
}

TEST_F(SyncRunnerTest, FalseIsNotARunSoTheNextRequestIsNotHeldBack) {
  result_ = false;  // sources still loading
  runner_.Request();
  Settle();
  ASSERT_EQ(runs_, 1);
  result_ = true;
  runner_.Request();
  Settle();
  EXPECT_EQ(runs_, 2);  // at once, not after kMin
  runner_.Request();
  Settle();
  EXPECT_EQ(runs_, 2);  // a real run did start the min interval
  Advance(kMin);
  EXPECT_EQ(runs_, 3);
}

TEST_F(SyncRunnerTest, FalseDoesNotStartTheMaxInterval) {
  result_ = false;
  runner_.Request();
  Settle();
  ASSERT_EQ(runs_, 1);
  Advance(kMax * 2);
  EXPECT_EQ(runs_, 1);  // never really ran, so nothing periodic yet
}

}  // namespace
}  // namespace sluice::proxier
