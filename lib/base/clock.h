// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <ostream>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::base {

// A reading of the monotonic clock (CLOCK_MONOTONIC: time since boot, never stepped), for
// deadlines, timeouts, backoffs and idle checks, which a step of the wall clock (NTP, an
// operator) must neither stretch nor cut short. A type of its own so that it cannot be mixed
// with wall time (absl::Time) or taken for a length of time: the difference of two is an
// absl::Duration. Infinite past and future saturate like absl's.
class MonoTime final {
 public:
  constexpr MonoTime() = default;  // the clock's origin
  static constexpr MonoTime FromSinceOrigin(absl::Duration d) { return MonoTime(d); }
  static constexpr MonoTime InfinitePast() { return MonoTime(-absl::InfiniteDuration()); }
  static constexpr MonoTime InfiniteFuture() { return MonoTime(absl::InfiniteDuration()); }
  // For printing and hashing only.
  constexpr absl::Duration SinceOrigin() const { return since_origin_; }

  MonoTime& operator+=(absl::Duration d) {
    since_origin_ += d;
    return *this;
  }
  MonoTime& operator-=(absl::Duration d) {
    since_origin_ -= d;
    return *this;
  }
  friend MonoTime operator+(MonoTime t, absl::Duration d) { return t += d; }
  friend MonoTime operator+(absl::Duration d, MonoTime t) { return t += d; }
  friend MonoTime operator-(MonoTime t, absl::Duration d) { return t -= d; }
  friend absl::Duration operator-(MonoTime a, MonoTime b) {
    return a.since_origin_ - b.since_origin_;
  }
  friend bool operator==(MonoTime a, MonoTime b) { return a.since_origin_ == b.since_origin_; }
  friend bool operator<(MonoTime a, MonoTime b) { return a.since_origin_ < b.since_origin_; }
  friend bool operator>(MonoTime a, MonoTime b) { return b < a; }
  friend bool operator<=(MonoTime a, MonoTime b) { return !(b < a); }
  friend bool operator>=(MonoTime a, MonoTime b) { return !(a < b); }
  friend std::ostream& operator<<(std::ostream& os, MonoTime t) {
    return os << "mono+" << absl::FormatDuration(t.since_origin_);
  }

 private:
  explicit constexpr MonoTime(absl::Duration d) : since_origin_(d) {}
  absl::Duration since_origin_;
};

// CLOCK_MONOTONIC now: the real clock's reading, for code that has no Clock to hand (a
// measurement shown in a log or metric, never a deadline: those take an injected Clock).
MonoTime MonotonicNow();

class Waiter;

// The time seam: one per process (RealClock::Get() in each main), handed to everything that
// keeps time, so that a test drives time with a FakeClock instead of sleeping. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall time: for what is shown or compared with other hosts' times (logs, /healthz,
  // timestamps in metrics and annotations, token expiry).
  virtual absl::Time Now() const = 0;
  // For deadlines, timeouts, backoffs and intervals; see MonoTime.
  virtual MonoTime MonotonicNow() const = 0;

 private:
  friend class Waiter;
  // `waiter` starts or ends a sleep until `deadline`. Returns whether the clock wakes it when
  // that time comes (a clock that moves only when told); the real one leaves that to the
  // waiter's timeout. Called without the waiter's lock held.
  virtual bool SleepBegins(Waiter& /*waiter*/, MonoTime /*deadline*/) const { return false; }
  virtual void SleepEnds(Waiter& /*waiter*/) const {}
};

// Thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  MonoTime MonotonicNow() const override { return base::MonotonicNow(); }
  static RealClock& Get() {
    static RealClock clock;
    return clock;
  }
};

// The one sleep of every retry loop and periodic thread: blocks until a deadline on its clock,
// or until Wake() or Stop(), so that shutdown never waits out a backoff and a test with a
// FakeClock drives the loop without sleeping. One thread sleeps on it at a time.
// Thread-safe.
class Waiter final {
 public:
  // `clock` must outlive the waiter.
  explicit Waiter(const Clock& clock) : clock_(clock) {}
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;

  // Returns true when the deadline passed or Wake() was called, false (at once, from then on)
  // once Stop() was called.
  bool SleepUntil(MonoTime deadline) ABSL_LOCKS_EXCLUDED(mu_);
  bool SleepFor(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    return SleepUntil(clock_.MonotonicNow() + d);
  }
  // Ends the sleep in progress early, or else the next one.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the sleep in progress and every later one.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  bool stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  const Clock& clock() const { return clock_; }

 private:
  friend class FakeClock;
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a blocked SleepUntil look at the clock again (the mutex re-evaluates its condition
  // on unlock).
  void Poke() ABSL_LOCKS_EXCLUDED(mu_) { absl::MutexLock lock(&mu_); }

  const Clock& clock_;
  mutable absl::Mutex mu_;
  MonoTime deadline_ ABSL_GUARDED_BY(mu_);
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// A clock that moves only when told to: Advance moves the wall and the monotonic reading
// together and wakes the Waiters whose deadline it passes. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000))
      : wall_ns_(absl::ToUnixNanos(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(wall_ns_.load()); }
  MonoTime MonotonicNow() const override {
    return MonoTime::FromSinceOrigin(absl::Nanoseconds(mono_ns_.load()));
  }
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks, in real time up to `timeout`, until at least `n` Waiters sleep on this clock: a test
  // calls it before Advance, so that the thread it drives has taken its deadline from the
  // clock's time before the move. False on timeout.
  bool AwaitSleepers(size_t n, absl::Duration timeout = absl::Seconds(30)) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool SleepBegins(Waiter& waiter, MonoTime deadline) const ABSL_LOCKS_EXCLUDED(mu_) override;
  void SleepEnds(Waiter& waiter) const ABSL_LOCKS_EXCLUDED(mu_) override;

  // Atomics, not mu_: a sleeping Waiter reads the time under its own lock, which Advance takes
  // while holding mu_ (the order is mu_, then a waiter's).
  std::atomic<int64_t> wall_ns_;
  std::atomic<int64_t> mono_ns_{absl::ToInt64Nanoseconds(absl::Hours(1))};  // any start will do
  mutable absl::Mutex mu_;
  mutable std::map<Waiter*, MonoTime> sleepers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::base
