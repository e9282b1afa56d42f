// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/health.h"

#include "gtest/gtest.h"

namespace sluice::admin {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

HealthInputs Fresh() {
  return {.now = kStart + absl::Seconds(1),
          .started = kStart,
          .last_updated = absl::InfinitePast(),
          .oldest_pending = absl::InfiniteFuture(),
          .sources_synced = false,
          .timeout = absl::Seconds(60)};
}

TEST(HealthTest, NotReadyUntilSyncedAndApplied) {
  HealthInputs in = Fresh();
  EXPECT_FALSE(Healthz(in).healthy);
  EXPECT_TRUE(Livez(in).healthy);
  in.sources_synced = true;
  EXPECT_FALSE(Healthz(in).healthy);
  in.last_updated = kStart + absl::Seconds(1);
  EXPECT_TRUE(Healthz(in).healthy);
  // kube-proxy 1.31: lastUpdated is the current time while healthy; Go's time.String().
  EXPECT_EQ(Healthz(in).body,
            "{\"lastUpdated\": \"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\",\"currentTime\": "
            "\"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\", \"nodeEligible\": true}");
  EXPECT_EQ(Livez(in).body,
            "{\"lastUpdated\": \"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\",\"currentTime\": "
            "\"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\"}");
}

TEST(HealthTest, NotReadyShowsGoZeroTimeBeforeTheFirstSync) {
  EXPECT_EQ(Healthz(Fresh()).body,
            "{\"lastUpdated\": \"0001-01-01 00:00:00 +0000 UTC\",\"currentTime\": "
            "\"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\", \"nodeEligible\": true}");
}

// KEP-3836: a node being deleted or tainted ToBeDeletedByClusterAutoscaler fails /healthz
// (load balancers drain it) but not /livez (the agent is not restarted), and the proxy itself
// still reports healthy to the service health checks.
TEST(HealthTest, IneligibleNodeFailsHealthzOnly) {
  HealthInputs in = Fresh();
  in.sources_synced = true;
  in.last_updated = kStart + absl::Milliseconds(500);
  in.node_eligible = false;
  EXPECT_FALSE(Healthz(in).healthy);
  EXPECT_TRUE(Livez(in).healthy);
  EXPECT_TRUE(ProxierHealthy(in));
  EXPECT_EQ(Healthz(in).body,
            "{\"lastUpdated\": \"2023-11-14 22:13:20.5 +0000 UTC m=+0.500000000\",\"currentTime\": "
            "\"2023-11-14 22:13:21 +0000 UTC m=+1.000000000\", \"nodeEligible\": false}");
}

TEST(HealthTest, GoTimeStringMatchesGo) {
  const absl::Time t = absl::FromUnixNanos(1'700'000'001'123'456'789);
  EXPECT_EQ(GoTimeString(t, t - absl::Milliseconds(12'500), absl::UTCTimeZone()),
            "2023-11-14 22:13:21.123456789 +0000 UTC m=+12.500000000");
  // Trailing zeros of the fraction go; the monotonic part keeps nine digits.
  EXPECT_EQ(GoTimeString(kStart + absl::Milliseconds(120), kStart - absl::Seconds(3600),
                         absl::UTCTimeZone()),
            "2023-11-14 22:13:20.12 +0000 UTC m=+3600.120000000");
  // A reading before the base (a wall clock step back) is signed, as Go's.
  EXPECT_EQ(GoTimeString(kStart, kStart + absl::Nanoseconds(1), absl::UTCTimeZone()),
            "2023-11-14 22:13:20 +0000 UTC m=-0.000000001");
  absl::TimeZone berlin;
  if (absl::LoadTimeZone("Europe/Berlin", &berlin)) {
    EXPECT_EQ(GoTimeString(kStart, kStart, berlin), "2023-11-14 23:13:20 +0100 CET m=+0.000000000");
  }
}

TEST(HealthTest, StuckPendingUpdateFailsBoth) {
  HealthInputs in = Fresh();
  in.sources_synced = true;
  in.last_updated = kStart;
  in.oldest_pending = kStart + absl::Seconds(10);
  in.now = kStart + absl::Seconds(69);
  EXPECT_TRUE(Healthz(in).healthy);
  in.now = kStart + absl::Seconds(71);
  EXPECT_FALSE(Healthz(in).healthy);
  EXPECT_FALSE(Livez(in).healthy);
}

TEST(HealthTest, FirstSyncNeverHappeningFailsLivezAfterTimeout) {
  HealthInputs in = Fresh();
  in.now = kStart + absl::Seconds(61);
  EXPECT_FALSE(Livez(in).healthy);
}

}  // namespace
}  // namespace sluice::admin
