// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::base {

// Time since an arbitrary fixed point (CLOCK_MONOTONIC): for intervals and deadlines, which a
// step of the wall clock (NTP, an operator) must neither stretch nor cut short. Clock::Now is
// for what is compared with wall times (timestamps in metrics and annotations).
inline absl::Duration MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::DurationFromTimespec(ts);
}

// The time seam: control-plane logic and event loops take a Clock& so tests can drive time
// without sleeping. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // For intervals and deadlines; see base::MonotonicNow.
  virtual absl::Duration MonotonicNow() const = 0;
  // Waits with `mu` held until `cond` holds or MonotonicNow() reaches `deadline`, as
  // absl::Mutex::AwaitWithTimeout does on real time; returns whether `cond` holds. For waits
  // that a test drives with a FakeClock (retry intervals, timeouts).
  virtual bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                          absl::Duration deadline) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu.AwaitWithTimeout(cond, deadline - MonotonicNow());
  }
};

// Thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  absl::Duration MonotonicNow() const override { return base::MonotonicNow(); }
  static RealClock& Get() {
    static RealClock clock;
    return clock;
  }
};

// A clock that moves only when told to: Advance moves the wall and the monotonic reading
// together. Thread-safe: the test advances it while the code under test reads it and waits.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : now_ns_(absl::ToUnixNanos(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(now_ns_.load()); }
  absl::Duration MonotonicNow() const override { return absl::Nanoseconds(mono_ns_.load()); }
  void Advance(absl::Duration d) {
    now_ns_ += absl::ToInt64Nanoseconds(d);
    mono_ns_ += absl::ToInt64Nanoseconds(d);
  }
  // Advance does not know the waiters' mutexes, so a waiter re-reads the fake time every real
  // millisecond (tests only).
  bool AwaitUntil(absl::Mutex& mu, const absl::Condition& cond,
                  absl::Duration deadline) const override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!cond.Eval()) {
      if (MonotonicNow() >= deadline) {
        return false;
      }
      mu.AwaitWithTimeout(cond, absl::Milliseconds(1));
    }
    return true;
  }

 private:
  std::atomic<int64_t> now_ns_;
  std::atomic<int64_t> mono_ns_{absl::ToInt64Nanoseconds(absl::Hours(1))};  // "since boot"
};

}  // namespace sluice::base
