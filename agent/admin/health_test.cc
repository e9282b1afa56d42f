// SPDX-License-Identifier: Apache-2.0
#include "agent/admin/health.h"

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
  EXPECT_EQ(Healthz(in).body,
            "{\"lastUpdated\": \"2023-11-14T22:13:21+00:00\", \"currentTime\": "
            "\"2023-11-14T22:13:21+00:00\"}");
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
