// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "lib/event/event_loop.h"

#include "tunnel/wire/read_gate.h"

namespace sluice::tunnel::wire {

// The deadlines of one connection whose peer has no per-connection window (an upstream
// Konnectivity peer) and whose consumer lags: it holds the shared stream (ReadGate) to pace
// the sender. A consumer that drained nothing for ReadGate::kStallGrace since the hold began
// is paused, not slow: the owner lets go of the stream (kRelease), so the other connections on
// it move again, and keeps buffering up to its hard bound without holding again until the
// consumer drains. One that still drained nothing after the stall timeout (--stall-timeout,
// minutes by default) is cut (kCut). Owns the timer that runs the owner's check at each
// deadline; the owner decides what "held" and "drained" mean. Used by the agent's BackendConn
// and the server's ConnectSession and ProxyStream. Thread: the owning loop's.
class StallWatch final {
 public:
  // A deadline that has passed is looked at again this much later (an owner may keep a peer
  // with nothing queued): often enough to act promptly, rarely enough to cost nothing.
  static constexpr absl::Duration kRecheck = absl::Milliseconds(100);
  // Upstream-peer default of --stall-timeout.
  static constexpr absl::Duration kDefaultTimeout = absl::Minutes(5);

  enum class Verdict {
    kWait,     // nothing to do yet; the check runs again at the next deadline
    kRelease,  // let go of the shared stream; keep the connection (the watch goes on)
    kCut,      // close the connection (the watch has stopped)
  };

  // `check` runs at each deadline; it calls Check and acts on the verdict. `timeout` >
  // kStallGrace: a shorter one cuts at the grace instead of releasing first.
  StallWatch(event::EventLoop& loop, absl::Duration timeout, absl::AnyInvocable<void()> check)
      : loop_(loop), timeout_(timeout), timer_(loop.CreateTimer(std::move(check))) {}

  // A hold began now: the grace (and the timeout, unless the peer drained since) counts from
  // here at the latest.
  void Start() {
    since_ = loop_.MonotonicNow();
    released_ = false;
  }
  // `last_drained`: when the consumer last took bytes (the loop's monotonic clock); `held`:
  // whether the owner holds the shared stream; `now` a fresh reading when drain times come
  // from other threads. Re-arms the timer at the next deadline (or kRecheck from now once it
  // has passed) unless the verdict is kCut.
  Verdict Check(base::MonoTime last_drained, bool held, base::MonoTime now);
  Verdict Check(base::MonoTime last_drained, bool held) {
    return Check(last_drained, held, loop_.MonotonicNow());
  }
  // Whether the owner may hold the stream again: not after a release for a stall until the
  // consumer has drained something since.
  bool MayHold(base::MonoTime last_drained) const {
    return !released_ || last_drained > released_at_;
  }
  // Drained, or closed: no more checks.
  void Stop() { timer_->Disarm(); }
  bool watching() const { return timer_->armed(); }
  absl::Duration timeout() const { return timeout_; }

 private:
  event::EventLoop& loop_;
  const absl::Duration timeout_;
  std::unique_ptr<event::Timer> timer_;
  base::MonoTime since_ = base::MonoTime::InfinitePast();  // no Start: only last_drained counts
  bool released_ = false;
  base::MonoTime released_at_;
};

}  // namespace sluice::tunnel::wire
