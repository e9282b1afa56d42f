// SPDX-License-Identifier: Apache-2.0
#include "agent/etcd/backoff.h"

#include "gtest/gtest.h"

namespace sluice::etcd {
namespace {

TEST(BackoffTest, DoublesUpToTheCapWithJitterAndResets) {
  Backoff b(absl::Milliseconds(100), absl::Milliseconds(500), 0.2);
  const double want[] = {100, 200, 400, 500, 500};
  for (double ms : want) {
    const double got = absl::ToDoubleMilliseconds(b.Next());
    EXPECT_GE(got, ms * 0.8);
    EXPECT_LE(got, ms * 1.2);
  }
  b.Reset();
  EXPECT_LE(absl::ToDoubleMilliseconds(b.Next()), 120);
}

TEST(BackoffTest, JitterSpreadsDelays) {
  Backoff b(absl::Seconds(1), absl::Seconds(1), 0.2);
  absl::Duration first = b.Next();
  bool differs = false;
  for (int i = 0; i < 20 && !differs; ++i) {
    differs = b.Next() != first;
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace sluice::etcd
