// SPDX-License-Identifier: Apache-2.0
#include "lib/base/backoff.h"

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(BackoffTest, GrowsWithJitterUpToTheCapAndResets) {
  Backoff b({.initial = absl::Seconds(1), .max = absl::Seconds(8), .factor = 2}, 42);
  const absl::Duration want[] = {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                                 absl::Seconds(8), absl::Seconds(8)};
  for (absl::Duration d : want) {
    absl::Duration got = b.Next();
    EXPECT_GE(got, d / 2);
    EXPECT_LE(got, d);
  }
  b.Reset();
  EXPECT_LE(b.Next(), absl::Seconds(1));
}

TEST(BackoffTest, JitterRangeIsAnOption) {
  Backoff b({.initial = absl::Milliseconds(100),
             .max = absl::Milliseconds(500),
             .jitter_min = 0.8,
             .jitter_max = 1.2});
  for (double ms : {100, 200, 400, 500, 500}) {
    const double got = absl::ToDoubleMilliseconds(b.Next());
    EXPECT_GE(got, ms * 0.8);
    EXPECT_LE(got, ms * 1.2);
  }
}

TEST(BackoffTest, JitterSpreadsDelays) {
  Backoff a({}, 1);
  Backoff b({}, 2);
  EXPECT_NE(a.Next(), b.Next());
}

}  // namespace
}  // namespace sluice::base
