// SPDX-License-Identifier: Apache-2.0
#include "lib/base/outage_probe.h"

#include <atomic>
#include <future>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testutil/process.h"

namespace sluice::base {
namespace {

constexpr absl::Duration kInterval = absl::Milliseconds(500);

// Polls `cond` for up to 10 s of real time: the probe runs on its own thread.
template <typename F>
bool Eventually(F cond) {
  return testutil::WaitFor(std::move(cond), absl::Seconds(10));
}

// A server that is up or down, and the probe of it.
class OutageProbeTest : public ::testing::Test {
 protected:
  OutageProbeTest() {
    probe_ = std::make_unique<OutageProbe>(
        OutageProbe::Options{.server = "test server", .interval = kInterval},
        OutageProbe::Callbacks{
            .probe = [this]() -> absl::Status {
              const bool up = up_;
              {
                absl::MutexLock lock(&mu_);
                times_.push_back(clock_.MonotonicNow());
              }
              ++done_;
              return up ? absl::OkStatus() : absl::UnavailableError("connection refused");
            },
            .cancel = [] {},
            .on_recovered = [this] { recovered_calls_++; },
            .on_failed = [this] { failed_calls_++; },
        },
        clock_);
  }
  ~OutageProbeTest() override {
    // Also after a failed assertion: no wait outlives the probe.
    stop_ = true;
    probe_->Wake();
    for (auto& w : waits_) {
      w.wait();
    }
    probe_.reset();
  }

  // Starts a client's wait on another thread.
  std::shared_future<OutageProbe::Wait> Wait(uint64_t ticket) {
    waits_.push_back(std::async(std::launch::async, [this, ticket] {
                       return probe_->Await(ticket, stop_);
                     }).share());
    return waits_.back();
  }
  static bool Ready(const std::shared_future<OutageProbe::Wait>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Advances one interval and waits for the probe it lets through to finish.
  bool NextProbe() {
    const int before = done_;
    clock_.Advance(kInterval);
    return Eventually([&] { return done_ == before + 1; });
  }
  std::vector<MonoTime> Times() {
    absl::MutexLock lock(&mu_);
    return times_;
  }

  // The server is down for `outage`; then it answers. Returns the probes sent meanwhile.
  void Outage(absl::Duration outage) {
    up_ = false;
    const uint64_t services = probe_->Unreachable();
    const uint64_t slices = probe_->Unreachable();
    auto a = Wait(services);
    auto b = Wait(slices);
    ASSERT_TRUE(Eventually([&] { return done_ == 1; }));  // the first, at once
    for (absl::Duration down = kInterval; down < outage; down += kInterval) {
      ASSERT_TRUE(NextProbe());
      EXPECT_FALSE(Ready(a));
    }
    // Each interval of the outage saw one probe, not a backoff growing with its length.
    EXPECT_EQ(done_.load(), outage / kInterval);
    up_ = true;
    // Whatever the outage's length, the next interval finds the server, and every client
    // goes on at once.
    ASSERT_TRUE(NextProbe());
    ASSERT_TRUE(Eventually([&] { return Ready(a) && Ready(b); }));
    EXPECT_EQ(a.get(), OutageProbe::Wait::kRecovered);
    EXPECT_EQ(b.get(), OutageProbe::Wait::kRecovered);
    EXPECT_EQ(recovered_calls_, 1);
    EXPECT_EQ(failed_calls_, outage / kInterval);  // each failed probe reported once
  }

  FakeClock clock_;
  std::atomic<bool> up_{true};
  std::atomic<bool> stop_{false};
  std::atomic<int> recovered_calls_{0};
  std::atomic<int> failed_calls_{0};
  std::atomic<int> done_{0};  // probes finished
  absl::Mutex mu_;
  std::vector<MonoTime> times_ ABSL_GUARDED_BY(mu_);  // of each probe, on the fake clock
  std::unique_ptr<OutageProbe> probe_;
  std::vector<std::shared_future<OutageProbe::Wait>> waits_;
};

TEST_F(OutageProbeTest, AThirtySecondOutageIsFoundWithinOneInterval) { Outage(absl::Seconds(30)); }

TEST_F(OutageProbeTest, ATwoMinuteOutageIsFoundWithinOneInterval) { Outage(absl::Seconds(120)); }

TEST_F(OutageProbeTest, ADroppedConnectionToALiveServerIsAnsweredAtOnce) {
  auto w = Wait(probe_->Unreachable());
  // No clock movement: the first probe goes at once.
  ASSERT_TRUE(Eventually([&] { return Ready(w); }));
  EXPECT_EQ(w.get(), OutageProbe::Wait::kAnswered);
  EXPECT_EQ(probe_->attempts(), 1);
  EXPECT_EQ(recovered_calls_, 0);
  EXPECT_EQ(failed_calls_, 0);
}

TEST_F(OutageProbeTest, ProbesStayOneIntervalApartAcrossOutages) {
  auto first = Wait(probe_->Unreachable());
  ASSERT_TRUE(Eventually([&] { return Ready(first); }));
  // A server that answers the probe but fails every request: the next failure waits for the
  // next interval rather than probing again at once.
  auto second = Wait(probe_->Unreachable());
  ASSERT_TRUE(NextProbe());
  ASSERT_TRUE(Eventually([&] { return Ready(second); }));
  EXPECT_EQ(second.get(), OutageProbe::Wait::kAnswered);
  const std::vector<MonoTime> times = Times();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_GE(times[1] - times[0], kInterval);
}

TEST_F(OutageProbeTest, OnlyAProbeStartedAfterTheFailureCounts) {
  up_ = false;
  auto early = Wait(probe_->Unreachable());
  ASSERT_TRUE(Eventually([&] { return done_ == 1; }));
  // A client that fails after probe 1 started waits for probe 2, even though probe 1 was sent.
  const uint64_t late = probe_->Unreachable();
  up_ = true;
  ASSERT_TRUE(NextProbe());
  auto w = Wait(late);
  ASSERT_TRUE(Eventually([&] { return Ready(w) && Ready(early); }));
  EXPECT_EQ(w.get(), OutageProbe::Wait::kRecovered);
  EXPECT_EQ(early.get(), OutageProbe::Wait::kRecovered);
  // Already answered: a later wait on the same ticket returns at once.
  EXPECT_EQ(probe_->Await(late, stop_), OutageProbe::Wait::kRecovered);
}

TEST_F(OutageProbeTest, AStoppedClientStopsWaiting) {
  up_ = false;
  auto w = Wait(probe_->Unreachable());
  ASSERT_TRUE(Eventually([&] { return done_ == 1; }));
  EXPECT_FALSE(Ready(w));
  stop_ = true;
  probe_->Wake();
  ASSERT_TRUE(Eventually([&] { return Ready(w); }));
  EXPECT_EQ(w.get(), OutageProbe::Wait::kStopped);
}

}  // namespace
}  // namespace sluice::base
