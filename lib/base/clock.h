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

// The time seam: control-plane logic and event loops take a Clock& so tests can drive time
// without sleeping. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // For intervals and deadlines; see base::MonotonicNow.
  virtual absl::Duration MonotonicNow() const = 0;
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
// together. Thread: the test's.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}
  absl::Time Now() const override { return now_; }
  absl::Duration MonotonicNow() const override { return mono_; }
  void Advance(absl::Duration d) {
    now_ += d;
    mono_ += d;
  }

 private:
  absl::Time now_;
  absl::Duration mono_ = absl::Hours(1);  // "since boot": any fixed start will do
};

}  // namespace sluice::base
