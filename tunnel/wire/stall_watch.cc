// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/stall_watch.h"

#include <algorithm>

namespace sluice::tunnel::wire {

bool StallWatch::Expired(absl::Duration last_drained, absl::Duration now) {
  const absl::Duration deadline = std::max(last_drained, since_) + ReadGate::kStallGrace;
  timer_->Arm(std::max(deadline - now, kRecheck));
  return now >= deadline;
}

}  // namespace sluice::tunnel::wire
