// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/stall_watch.h"

#include <algorithm>

namespace sluice::tunnel::wire {

bool StallWatch::Expired(base::MonoTime last_drained, base::MonoTime now) {
  const base::MonoTime deadline = std::max(last_drained, since_) + ReadGate::kStallGrace;
  timer_->Arm(std::max(deadline - now, kRecheck));
  return now >= deadline;
}

}  // namespace sluice::tunnel::wire
