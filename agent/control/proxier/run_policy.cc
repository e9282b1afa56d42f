// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/run_policy.h"

#include <algorithm>

namespace sluice::proxier {

RunPolicy::RunPolicy(absl::Duration min_interval, absl::Duration max_interval,
                     absl::Duration retry_interval)
    : min_interval_(min_interval),
      max_interval_(std::max(min_interval, max_interval)),
      retry_interval_(std::max(min_interval, retry_interval)) {}

base::MonoTime RunPolicy::Due() const {
  if (last_run_ == base::MonoTime::InfinitePast()) {
    return requested_ ? base::MonoTime::InfinitePast() : base::MonoTime::InfiniteFuture();
  }
  base::MonoTime due = std::min(last_run_ + max_interval_, retry_at_);
  if (requested_) {
    due = std::min(due, last_run_ + min_interval_);
  }
  return due;
}

void RunPolicy::Ran(base::MonoTime now) {
  last_run_ = now;
  requested_ = false;
  retry_at_ = base::MonoTime::InfiniteFuture();
}

}  // namespace sluice::proxier
