// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/sync_runner.h"

#include <algorithm>

namespace sluice::proxier {

SyncRunner::SyncRunner(event::EventLoop& loop, RunPolicy policy,
                       absl::AnyInvocable<absl::StatusOr<bool>()> sync)
    : loop_(loop),
      policy_(policy),
      sync_(std::move(sync)),
      timer_(loop.CreateTimer([this] { Fire(); })) {}

void SyncRunner::Request() {
  loop_.Post([this] {
    policy_.Request();
    Schedule();
  });
}

void SyncRunner::Schedule() {
  const base::MonoTime due = policy_.Due();
  if (due == base::MonoTime::InfiniteFuture()) {
    timer_->Disarm();
    return;
  }
  timer_->Arm(std::max(absl::ZeroDuration(), due - Now()));
}

void SyncRunner::Fire() {
  const base::MonoTime now = Now();
  if (policy_.Due() > now) {
    Schedule();  // woke early (a re-arm raced the timer)
    return;
  }
  const absl::StatusOr<bool> ran = sync_();
  if (ran.ok() && !*ran) {
    policy_.Skipped();
  } else {
    policy_.Ran(now);
    if (!ran.ok()) {
      policy_.Failed(Now());
    }
  }
  Schedule();
}

}  // namespace sluice::proxier
