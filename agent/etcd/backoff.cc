// SPDX-License-Identifier: Apache-2.0
#include "agent/etcd/backoff.h"

#include <algorithm>

namespace sluice::etcd {

Backoff::Backoff(absl::Duration initial, absl::Duration max, double jitter)
    : initial_(initial),
      max_(max),
      jitter_(jitter),
      current_(initial),
      rng_(std::random_device{}()) {}

absl::Duration Backoff::Next() {
  const absl::Duration base = current_;
  current_ = std::min(max_, current_ * 2);
  std::uniform_real_distribution<double> spread(1 - jitter_, 1 + jitter_);
  return base * spread(rng_);
}

}  // namespace sluice::etcd
