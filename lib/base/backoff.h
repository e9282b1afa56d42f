// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace sluice::base {

// Exponential retry delays with jitter, so that every node's agent does not hit a recovering
// server (API server, etcd) in the same instant. Delay n is uniform in [d * jitter_min,
// d * jitter_max] with d = min(max, initial * factor^n). Thread: the owner's.
class Backoff final {
 public:
  struct Options {
    absl::Duration initial = absl::Milliseconds(800);  // client-go's reflector starts here
    absl::Duration max = absl::Seconds(30);
    double factor = 2;
    double jitter_min = 0.5;
    double jitter_max = 1.0;
  };

  explicit Backoff(Options options, uint64_t seed = std::random_device{}());

  absl::Duration Next();
  // After a success: the next failure waits the initial delay again.
  void Reset() { step_ = initial_step_; }

 private:
  const Options options_;
  const absl::Duration initial_step_;
  absl::Duration step_;
  std::mt19937_64 rng_;
};

}  // namespace sluice::base
