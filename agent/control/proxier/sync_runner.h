// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "lib/event/event_loop.h"

#include "agent/control/proxier/run_policy.h"

namespace sluice::proxier {

// Runs `sync` on the control-plane loop as RunPolicy decides: coalescing requests within the
// min interval, at least every max interval, retrying failures. `sync` returns whether it ran:
// false (nothing to do yet) does not count as a run, so the first real sync is not delayed by
// one min interval. Request() is thread-safe (sources and the mux call it from their threads);
// everything else runs on the loop.
class SyncRunner final {
 public:
  SyncRunner(event::EventLoop& loop, RunPolicy policy,
             absl::AnyInvocable<absl::StatusOr<bool>()> sync);

  void Request();

 private:
  void Schedule();
  void Fire();
  // The loop's monotonic clock as the policy's time line: a step of the wall clock must not
  // delay (or hurry) every sync by its size. A fresh reading, not the iteration's: a failure is
  // retried from when the sync ended.
  base::MonoTime Now() const { return loop_.clock().MonotonicNow(); }

  event::EventLoop& loop_;
  RunPolicy policy_;
  absl::AnyInvocable<absl::StatusOr<bool>()> sync_;
  std::unique_ptr<event::Timer> timer_;
};

}  // namespace sluice::proxier
