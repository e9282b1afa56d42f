// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/stall_watch.h"

#include <algorithm>

namespace sluice::tunnel::wire {

StallWatch::Verdict StallWatch::Check(base::MonoTime last_drained, bool held, base::MonoTime now) {
  const base::MonoTime idle_since = std::max(last_drained, since_);
  const base::MonoTime cut_at = idle_since + std::max(timeout_, ReadGate::kStallGrace);
  if (now >= cut_at) {
    Stop();
    return Verdict::kCut;
  }
  const base::MonoTime release_at = idle_since + ReadGate::kStallGrace;
  if (held && now >= release_at) {
    released_ = true;
    released_at_ = now;
    timer_->Arm(std::max(cut_at - now, kRecheck));
    return Verdict::kRelease;
  }
  const base::MonoTime next = held ? release_at : cut_at;
  timer_->Arm(std::max(next - now, kRecheck));
  return Verdict::kWait;
}

}  // namespace sluice::tunnel::wire
