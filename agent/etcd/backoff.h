// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <random>

#include "absl/time/time.h"

namespace sluice::etcd {

// Exponential reconnect delays with jitter, so agents that lost etcd together do not come back
// in lockstep. Thread: the owner's.
class Backoff final {
 public:
  // Delays start at `initial` and double up to `max`; each is spread by +-`jitter` (a fraction).
  Backoff(absl::Duration initial, absl::Duration max, double jitter = 0.2);

  absl::Duration Next();
  // After a healthy session: the next delay is `initial` again.
  void Reset() { current_ = initial_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  const double jitter_;
  absl::Duration current_;
  std::minstd_rand rng_;
};

}  // namespace sluice::etcd
