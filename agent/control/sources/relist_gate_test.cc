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
    });
  }
  std::vector<std::string> Applied() {
    absl::MutexLock lock(&mu_);
    return applied_;
  }

  base::FakeClock clock_;
  absl::Mutex mu_;
  std::vector<std::string> applied_ ABSL_GUARDED_BY(mu_);
  RelistGate gate_{{"services", "endpointslices"}, kTimeout, clock_};
};

TEST_F(RelistGateTest, PassesThroughWhenNotHeld) {
  Push("service a");
  Push("slice a-1");
  EXPECT_EQ(Applied(), (std::vector<std::string>{"service a", "slice a-1"}));
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
