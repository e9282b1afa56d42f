// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "absl/time/time.h"
#include "lib/base/clock.h"

namespace sluice::proxier {

// When the next sync is due, as kube-proxy's BoundedFrequencyRunner decides it: a requested
// run happens as soon as `min_interval` has passed since the last run (so bursts of changes
// coalesce into one sync), a failed run is retried after `retry_interval`, and a run happens at
// least every `max_interval` even without requests. Pure state, driven by the caller's (monotonic)
// times. Thread: the owner's.
class RunPolicy final {
 public:
  RunPolicy(absl::Duration min_interval, absl::Duration max_interval,
            absl::Duration retry_interval);

  void Request() { requested_ = true; }
  // The run that just ended failed: run again after the retry interval.
  void Failed(base::MonoTime now) { retry_at_ = now + retry_interval_; }
  // When the next run is due (may be in the past: run now).
  base::MonoTime Due() const;
  // Records a run that starts at `now`.
  void Ran(base::MonoTime now);
  // A requested run found nothing it could do yet (sources still loading): it is not a run, so
  // the next request is not held back by the min interval.
  void Skipped() { requested_ = false; }

 private:
  const absl::Duration min_interval_;
  const absl::Duration max_interval_;
  const absl::Duration retry_interval_;
  base::MonoTime last_run_ = base::MonoTime::InfinitePast();
  base::MonoTime retry_at_ = base::MonoTime::InfiniteFuture();
  bool requested_ = false;
};

}  // namespace sluice::proxier
