// SPDX-License-Identifier: Apache-2.0
#include "lib/base/clock.h"

#include <time.h>

namespace sluice::base {

MonoTime MonotonicNow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return MonoTime::FromSinceOrigin(absl::DurationFromTimespec(ts));
}

bool Waiter::Done() const { return stopped_ || woken_ || clock_.MonotonicNow() >= deadline_; }

bool Waiter::SleepUntil(MonoTime deadline) {
  if (clock_.MonotonicNow() >= deadline) {  // not a sleep: a fake clock need not list it
    absl::MutexLock lock(&mu_);
    woken_ = false;
    return !stopped_;
  }
  const bool clock_wakes = clock_.SleepBegins(*this, deadline);
  bool was_stopped;
  {
    absl::MutexLock lock(&mu_);
    deadline_ = deadline;
    const absl::Condition done(this, &Waiter::Done);
    if (clock_wakes) {
      mu_.Await(done);
    }
    // The time left as the timeout: absl's Mutex counts it on the wall clock, so a step may end
    // it early or late; the loop then looks at the monotonic clock again.
    while (!Done()) {
      mu_.AwaitWithTimeout(done, deadline - clock_.MonotonicNow());
    }
    was_stopped = stopped_;
    woken_ = false;
  }
  clock_.SleepEnds(*this);
  return !was_stopped;
}

void Waiter::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void Waiter::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

bool Waiter::stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  wall_ns_ += absl::ToInt64Nanoseconds(d);
  mono_ns_ += absl::ToInt64Nanoseconds(d);
  const MonoTime now = MonotonicNow();
  for (const auto& [waiter, deadline] : sleepers_) {
    if (deadline <= now) {
      waiter->Poke();
    }
  }
}

bool FakeClock::AwaitSleepers(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sleepers_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool FakeClock::SleepBegins(Waiter& waiter, MonoTime deadline) const {
  absl::MutexLock lock(&mu_);
  sleepers_[&waiter] = deadline;
  return true;
}

void FakeClock::SleepEnds(Waiter& waiter) const {
  absl::MutexLock lock(&mu_);
  sleepers_.erase(&waiter);
}

}  // namespace sluice::base
