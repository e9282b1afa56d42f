// SPDX-License-Identifier: Apache-2.0
#include "lib/base/backoff.h"

#include <algorithm>

namespace sluice::base {

Backoff::Backoff(Options options, uint64_t seed)
    : options_(options),
      initial_step_(std::min(options.initial, options.max)),
      step_(initial_step_),
      rng_(seed) {}

absl::Duration Backoff::Next() {
  const absl::Duration d = step_;
  step_ = std::min(options_.max, step_ * options_.factor);
  std::uniform_real_distribution<double> jitter(options_.jitter_min, options_.jitter_max);
  return d * jitter(rng_);
}

}  // namespace sluice::base
