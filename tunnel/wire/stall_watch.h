// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "lib/event/event_loop.h"

#include "tunnel/wire/read_gate.h"

namespace sluice::tunnel::wire {

// The deadline of one connection that holds its agent stream (ReadGate): a peer that drained
// nothing for kStallGrace since the hold began is stalled, not slow, and its owner closes it
// so the other connections on that stream move again. Owns the timer that runs the owner's
// check at the deadline; the owner decides what "held" and "drained" mean. Used by the agent's
// BackendConn and the server's ConnectSession and ProxyStream. Thread: the owning loop's.
class StallWatch final {
 public:
  // A deadline that has passed is looked at again this much later (an owner may keep a peer
  // with nothing queued): often enough to close a stall promptly, rarely enough to cost nothing.
  static constexpr absl::Duration kRecheck = absl::Milliseconds(100);

  // `check` runs at each deadline; it calls Expired, and closes the peer if so.
  StallWatch(event::EventLoop& loop, absl::AnyInvocable<void()> check)
      : loop_(loop), timer_(loop.CreateTimer(std::move(check))) {}

  // The hold began now: the peer's grace counts from here at the latest.
  void Start() { since_ = loop_.MonotonicNow(); }
  // Whether kStallGrace has passed since both the hold began and `last_drained` (the loop's
  // monotonic clock), as of `now` (default: the loop's iteration time; an owner whose drain
  // times come from other threads passes a fresh reading). Either way the check runs again: at
  // the deadline, or kRecheck from now once it has passed; an owner that closes calls Stop.
  bool Expired(base::MonoTime last_drained, base::MonoTime now);
  bool Expired(base::MonoTime last_drained) { return Expired(last_drained, loop_.MonotonicNow()); }
  // The hold ended (drained, released, closed): no more checks.
  void Stop() { timer_->Disarm(); }
  bool watching() const { return timer_->armed(); }

 private:
  event::EventLoop& loop_;
  std::unique_ptr<event::Timer> timer_;
  base::MonoTime since_ = base::MonoTime::InfinitePast();  // no Start: only last_drained counts
};

}  // namespace sluice::tunnel::wire
