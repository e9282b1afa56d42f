// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <time.h>

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

// The time seam: control-plane logic takes a Clock& so tests can drive time without sleeping.
// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  static RealClock& Get() {
    static RealClock clock;
    return clock;
  }
};

// A clock that moves only when told to. Thread: the test's.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_;
};

}  // namespace sluice::base
