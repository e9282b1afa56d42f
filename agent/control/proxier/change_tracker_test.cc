// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/change_tracker.h"

#include "gtest/gtest.h"

#include "agent/control/config/mux.h"

namespace sluice::proxier {
namespace {

config::ServicePtr Svc(const std::string& name, int port) {
  auto s = std::make_shared<config::Service>();
  s->meta.id = {"default", name};
  config::ServicePort p;
  p.port = port;
  s->ports.push_back(p);
  return s;
}

class ChangeTrackerTest : public ::testing::Test {
 protected:
  base::FakeClock clock_;
  int pokes_ = 0;
  ChangeTracker tracker_{clock_, [this] { ++pokes_; }};
};

TEST_F(ChangeTrackerTest, AddThenDeleteIsNothing) {
  auto a = Svc("a", 80);
  tracker_.OnServiceUpdate(nullptr, a);
  tracker_.OnServiceUpdate(a, nullptr);
  EXPECT_TRUE(tracker_.Take().empty());
  EXPECT_EQ(pokes_, 2);
  EXPECT_EQ(tracker_.ServiceChangesTotal(), 2u);
}

TEST_F(ChangeTrackerTest, DeleteThenAddIsOneUpdate) {
  auto a = Svc("a", 80);
  auto b = Svc("a", 81);
  tracker_.OnServiceUpdate(a, nullptr);
  tracker_.OnServiceUpdate(nullptr, b);
  Changes c = tracker_.Take();
  ASSERT_EQ(c.services.size(), 1u);
  EXPECT_EQ(c.services.begin()->second.first, a);
  EXPECT_EQ(c.services.begin()->second.second, b);
}

TEST_F(ChangeTrackerTest, ChangeBackToSyncedValueIsNothing) {
  auto a = Svc("a", 80);
  tracker_.OnServiceUpdate(a, Svc("a", 81));
  tracker_.OnServiceUpdate(Svc("a", 81), Svc("a", 80));
  EXPECT_EQ(tracker_.PendingServices(), 0u);
}

TEST_F(ChangeTrackerTest, UpdatesCollapseKeepingTheFirstPrevious) {
  auto a = Svc("a", 80);
  tracker_.OnServiceUpdate(nullptr, a);
  tracker_.OnServiceUpdate(a, Svc("a", 81));
  tracker_.OnServiceUpdate(Svc("a", 81), Svc("a", 82));
  Changes c = tracker_.Take();
  ASSERT_EQ(c.services.size(), 1u);
  EXPECT_EQ(c.services.begin()->second.first, nullptr);
  EXPECT_EQ(c.services.begin()->second.second->ports[0].port, 82);
  EXPECT_TRUE(tracker_.Take().empty());
}

TEST_F(ChangeTrackerTest, OldestPendingAndTriggerTimes) {
  EXPECT_EQ(tracker_.OldestPending(), absl::InfiniteFuture());
  const absl::Time t0 = clock_.Now();
  auto slice = std::make_shared<config::EndpointSlice>();
  slice->meta.id = {"default", "a-1"};
  slice->meta.annotations[config::kLastChangeTriggerTimeAnnotation] = "2023-11-14T22:13:20Z";
  tracker_.OnEndpointSliceUpdate(nullptr, slice);
  clock_.Advance(absl::Seconds(5));
  tracker_.OnServiceUpdate(nullptr, Svc("a", 80));
  EXPECT_EQ(tracker_.OldestPending(), t0);
  EXPECT_EQ(tracker_.PendingSlices(), 1u);
  Changes c = tracker_.Take();
  ASSERT_EQ(c.trigger_times.size(), 1u);
  EXPECT_EQ(c.trigger_times[0], absl::FromUnixSeconds(1700000000));
  EXPECT_EQ(tracker_.OldestPending(), absl::InfiniteFuture());
}

TEST_F(ChangeTrackerTest, SyncedNeedsBothKinds) {
  tracker_.OnServicesSynced();
  EXPECT_FALSE(tracker_.Synced());
  tracker_.OnEndpointSlicesSynced();
  EXPECT_TRUE(tracker_.Synced());
}

// After an outage a source hands its relisted Services and EndpointSlices (and "synced") to the
// mux as one batch. A sync landing at any moment, here right after each change the tracker
// records (what the runner's poke allows at worst), takes all of it or none: never the new
// Service with its slice from before the outage.
TEST(ChangeTrackerBatchTest, ASyncTakesAllOfABatchOrNone) {
  base::FakeClock clock;
  config::Mux mux;
  std::vector<Changes> syncs;
  ChangeTracker* self = nullptr;
  ChangeTracker tracker(clock, [&] {
    if (self->Synced()) {  // as the proxier: no sync before both kinds are synced
      syncs.push_back(self->Take());
    }
  });
  self = &tracker;
  mux.AddServiceHandler(&tracker);
  mux.AddEndpointSliceHandler(&tracker);
  mux.AddBatchHandler(&tracker);
  config::SourceChannel* kube = mux.Channel("kube");
  auto slice = std::make_shared<config::EndpointSlice>();
  slice->meta.id = {"default", "a-1"};
  slice->service_name = "a";
  kube->Batch([&] {
    kube->UpdateServices(config::Op::kSet, {Svc("a", 80), Svc("b", 80)});
    kube->UpdateEndpointSlices(config::Op::kSet, {slice});
    kube->MarkSynced();
    EXPECT_FALSE(tracker.Synced());  // not before what it announces is pending
  });
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].services.size(), 2u);
  EXPECT_EQ(syncs[0].slices.size(), 1u);
  // Collapsed onto what was pending: a change back within the next batch is nothing.
  kube->UpdateServices(config::Op::kRemove, {Svc("b", 80)});
  kube->Batch([&] { kube->UpdateServices(config::Op::kAdd, {Svc("b", 80)}); });
  ASSERT_EQ(syncs.size(), 3u);
  EXPECT_EQ(syncs[1].services.size(), 1u);  // the removal, taken before the batch
  EXPECT_EQ(syncs[2].services.size(), 1u);  // and the batch's add
  EXPECT_EQ(tracker.PendingServices(), 0u);
}

TEST(ChangeTrackerBatchTest, ABatchsChangesCollapseOntoWhatIsPending) {
  base::FakeClock clock;
  int pokes = 0;
  ChangeTracker tracker(clock, [&] { ++pokes; });
  auto a = Svc("a", 80);
  tracker.OnServiceUpdate(nullptr, a);
  tracker.OnBatchBegin();
  tracker.OnServiceUpdate(a, nullptr);  // added and removed before any sync: nothing
  tracker.OnServiceUpdate(nullptr, Svc("c", 80));
  EXPECT_EQ(tracker.PendingServices(), 1u);  // only `a`, until the batch ends
  EXPECT_EQ(pokes, 1);
  tracker.OnBatchEnd();
  EXPECT_EQ(pokes, 2);
  Changes c = tracker.Take();
  ASSERT_EQ(c.services.size(), 1u);
  EXPECT_EQ(c.services.begin()->first.name, "c");
}

}  // namespace
}  // namespace sluice::proxier
