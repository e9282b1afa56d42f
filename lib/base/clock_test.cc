// SPDX-License-Identifier: Apache-2.0
#include "lib/base/clock.h"

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(MonoTimeTest, DifferencesAreDurationsAndInfinitiesSaturate) {
  const MonoTime t = MonoTime::FromSinceOrigin(absl::Seconds(10));
  EXPECT_EQ((t + absl::Seconds(5)) - t, absl::Seconds(5));
  EXPECT_LT(t, t + absl::Nanoseconds(1));
  EXPECT_GT(MonoTime::InfiniteFuture(), t + absl::Hours(1'000'000));
  EXPECT_LT(MonoTime::InfinitePast(), MonoTime());
  EXPECT_EQ(MonoTime::InfiniteFuture() + absl::Seconds(1), MonoTime::InfiniteFuture());
}

TEST(WaiterTest, RealClockSleepEndsAtTheDeadline) {
  Waiter waiter(RealClock::Get());
  const MonoTime deadline = MonotonicNow() + absl::Milliseconds(2);
  EXPECT_TRUE(waiter.SleepUntil(deadline));
  EXPECT_GE(MonotonicNow(), deadline);
}

TEST(WaiterTest, FakeClockWakesTheSleeperOnlyOncePastItsDeadline) {
  FakeClock clock;
  Waiter waiter(clock);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    EXPECT_TRUE(waiter.SleepFor(absl::Seconds(10)));
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitSleepers(1));
  clock.Advance(absl::Seconds(9));
  EXPECT_FALSE(woke);
  clock.Advance(absl::Seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke);
  EXPECT_FALSE(clock.AwaitSleepers(1, absl::ZeroDuration()));
}

TEST(WaiterTest, StopEndsTheSleepAndEveryLaterOne) {
  FakeClock clock;
  Waiter waiter(clock);
  std::thread sleeper([&] { EXPECT_FALSE(waiter.SleepUntil(MonoTime::InfiniteFuture())); });
  ASSERT_TRUE(clock.AwaitSleepers(1));
  waiter.Stop();
  sleeper.join();
  EXPECT_TRUE(waiter.stopped());
  EXPECT_FALSE(waiter.SleepFor(absl::Hours(1)));
}

TEST(WaiterTest, WakeEndsOneSleepEvenBeforeItBegins) {
  FakeClock clock;
  Waiter waiter(clock);
  waiter.Wake();
  EXPECT_TRUE(waiter.SleepFor(absl::Hours(1)));  // returns at once: the wake was pending
  std::thread sleeper([&] { EXPECT_TRUE(waiter.SleepFor(absl::Hours(1))); });
  ASSERT_TRUE(clock.AwaitSleepers(1));  // the pending wake was consumed: this one sleeps
  waiter.Wake();
  sleeper.join();
}

}  // namespace
}  // namespace sluice::base
