// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/relist_gate.h"

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testutil/process.h"

namespace sluice::sources {
namespace {

constexpr int kServices = 0;
constexpr int kSlices = 1;
constexpr absl::Duration kTimeout = absl::Seconds(10);

// Polls `cond` for up to 10 s of real time: the timeout fires on the gate's thread.
template <typename F>
bool Eventually(F cond) {
  return testutil::WaitFor(std::move(cond), absl::Seconds(10));
}

class RelistGateTest : public ::testing::Test {
 protected:
  void Push(const std::string& what) {
    gate_.Push([this, what] {
      absl::MutexLock lock(&mu_);
      applied_.push_back(what);
      if (in_batch_) {
        batches_.back().push_back(what);
      }
    });
  }
  // What each batch let through.
  std::vector<std::vector<std::string>> Batches() {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  std::vector<std::string> Applied() {
    absl::MutexLock lock(&mu_);
    return applied_;
  }

  base::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> applied_ ABSL_GUARDED_BY(mu_);
  bool in_batch_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::vector<std::string>> batches_ ABSL_GUARDED_BY(mu_);
  RelistGate gate_{
      {"services", "endpointslices"}, kTimeout, clock_, [this](absl::FunctionRef<void()> pushes) {
        {
          absl::MutexLock lock(&mu_);
          in_batch_ = true;
          batches_.emplace_back();
        }
        pushes();
        absl::MutexLock lock(&mu_);
        in_batch_ = false;
      }};
};

TEST_F(RelistGateTest, PassesThroughWhenNotHeld) {
  Push("service a");
  Push("slice a-1");
  EXPECT_EQ(Applied(), (std::vector<std::string>{"service a", "slice a-1"}));
  EXPECT_TRUE(Batches().empty());
}

// The mux applies what a hold kept back as one update: a sync cannot land between the
// Services and the EndpointSlices listed after the outage.
TEST_F(RelistGateTest, WhatAHoldKeptBackIsLetThroughAsOneBatch) {
  gate_.Hold();
  Push("services list");
  gate_.Listed(kServices);
  Push("slices list");
  gate_.Listed(kSlices);
  Push("slice a-1 changed");  // after the release: on its own
  EXPECT_EQ(Batches(), (std::vector<std::vector<std::string>>{{"services list", "slices list"}}));
  EXPECT_EQ(Applied().size(), 3u);
}

TEST_F(RelistGateTest, AfterAnOutageServicesWaitForTheSlicesListedWithThem) {
  gate_.Hold();
  Push("services list");
  gate_.Listed(kServices);
  Push("service b added");  // a watch event after the list: still held
  EXPECT_TRUE(Applied().empty());
  Push("slices list");
  gate_.Listed(kSlices);
  EXPECT_FALSE(gate_.held());
  EXPECT_EQ(Applied(),
            (std::vector<std::string>{"services list", "service b added", "slices list"}));
  Push("slice b-1 added");
  EXPECT_EQ(Applied().size(), 4u);
}

TEST_F(RelistGateTest, AListFromBeforeTheHoldDoesNotCount) {
  gate_.Listed(kSlices);
  gate_.Hold();
  Push("services list");
  gate_.Listed(kServices);
  EXPECT_TRUE(gate_.held());
  EXPECT_TRUE(Applied().empty());
}

TEST_F(RelistGateTest, AKindThatCannotBeListedHoldsTheRestBackForTheTimeoutOnly) {
  gate_.Hold();
  Push("services list");
  gate_.Listed(kServices);
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_TRUE(gate_.held());  // the gate's thread would have to see a passed deadline
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return !gate_.held(); }));
  EXPECT_EQ(Applied(), (std::vector<std::string>{"services list"}));
}

}  // namespace
}  // namespace sluice::sources
