// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/run_policy.h"

#include "gtest/gtest.h"

namespace sluice::proxier {
namespace {

const base::MonoTime kT0 = base::MonoTime::FromSinceOrigin(absl::Seconds(1000));

TEST(RunPolicyTest, NothingRunsUntilRequested) {
  RunPolicy p(absl::Seconds(1), absl::Seconds(30), absl::Seconds(5));
  EXPECT_EQ(p.Due(), base::MonoTime::InfiniteFuture());
  p.Request();
  EXPECT_EQ(p.Due(), base::MonoTime::InfinitePast());  // first run: at once
}

TEST(RunPolicyTest, RequestsCoalesceWithinMinInterval) {
  RunPolicy p(absl::Seconds(1), absl::Seconds(30), absl::Seconds(5));
  p.Request();
  p.Ran(kT0);
  EXPECT_EQ(p.Due(), kT0 + absl::Seconds(30));  // periodic
  p.Request();
  p.Request();
  EXPECT_EQ(p.Due(), kT0 + absl::Seconds(1));  // not before min interval
  p.Ran(kT0 + absl::Seconds(1));
  EXPECT_EQ(p.Due(), kT0 + absl::Seconds(31));
}

TEST(RunPolicyTest, RequestLongAfterLastRunIsDueNow) {
  RunPolicy p(absl::Seconds(1), absl::Seconds(30), absl::Seconds(5));
  p.Request();
  p.Ran(kT0);
  p.Request();
  EXPECT_LE(p.Due(), kT0 + absl::Seconds(10));  // in the past relative to t0+10s
}

// The first syncs find the sources still loading: they are not runs, so the one requested when
// the last source delivers is due at once, not one min interval later.
TEST(RunPolicyTest, SkippedRunsDoNotHoldBackTheFirstRealOne) {
  RunPolicy p(absl::Seconds(1), absl::Seconds(30), absl::Seconds(5));
  p.Request();
  EXPECT_EQ(p.Due(), base::MonoTime::InfinitePast());
  p.Skipped();
  EXPECT_EQ(p.Due(), base::MonoTime::InfiniteFuture());  // nothing to do until the next request
  p.Request();
  EXPECT_EQ(p.Due(), base::MonoTime::InfinitePast());
}

TEST(RunPolicyTest, FailureRetries) {
  RunPolicy p(absl::Seconds(1), absl::Seconds(30), absl::Seconds(5));
  p.Request();
  p.Ran(kT0);
  p.Failed(kT0);
  EXPECT_EQ(p.Due(), kT0 + absl::Seconds(5));
  p.Ran(kT0 + absl::Seconds(5));
  EXPECT_EQ(p.Due(), kT0 + absl::Seconds(35));
}

TEST(RunPolicyTest, ZeroMinIntervalRunsEveryRequest) {
  RunPolicy p(absl::ZeroDuration(), absl::Seconds(30), absl::ZeroDuration());
  p.Request();
  p.Ran(kT0);
  p.Request();
  EXPECT_EQ(p.Due(), kT0);
}

}  // namespace
}  // namespace sluice::proxier
