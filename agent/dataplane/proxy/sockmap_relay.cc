// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/sockmap_relay.h"

#include "lib/base/log.h"

namespace sluice::proxy {

const char* SockmapStateName(SockmapRelay::State state) {
  switch (state) {
    case SockmapRelay::State::kPending:
      return "pending";
    case SockmapRelay::State::kAttached:
      return "attached";
    case SockmapRelay::State::kPaused:
      return "paused";
    case SockmapRelay::State::kForwarding:
      return "forwarding";
    case SockmapRelay::State::kResuming:
      return "resuming";
    case SockmapRelay::State::kDraining:
      return "draining";
    case SockmapRelay::State::kUser:
      return "user";
  }
  return "unknown";
}

SockmapRelay::SockmapRelay(fastpath::KernelLink& link, fastpath::Side src, SplicePump& pump,
                           SockmapFlow& flow)
    : link_(link), src_(src), pump_(pump), flow_(flow), pump_base_(pump.bytes()) {}

SockmapRelay::~SockmapRelay() { SetPaused(false); }

void SockmapRelay::SetPaused(bool paused) {
  if (paused == counted_paused_) {
    return;
  }
  counted_paused_ = paused;
  flow_.paused.Add(paused ? 1 : -1);
  if (paused) {
    flow_.pauses.Inc();
  }
}

bool SockmapRelay::Measure() {
  auto p = link_.Measure(src_, Forwarded());
  if (!p.ok()) {
    VLOG(2) << "sockmap measure: " << p.status();
    return false;
  }
  last_ = *p;
  return true;
}

bool SockmapRelay::Attach() {
  if (state_ != State::kPending) {
    return kernel();
  }
  if (absl::Status st = link_.Attach(src_); !st.ok()) {
    VLOG(2) << "sockmap attach: " << st;  // EOPNOTSUPP: the source got its FIN meanwhile
    state_ = State::kUser;
    return false;
  }
  state_ = State::kAttached;
  pump_at_attach_ = pump_.bytes();
  return true;
}

SockmapRelay::Next SockmapRelay::OnSignal() {
  if (state_ != State::kAttached) {
    return Next::kNothing;  // raised just before the direction paused or ended
  }
  if (!Measure()) {
    return Next::kFailed;
  }
  if (last_.in_flight() > flow_.marks.high) {
    return Pause();
  }
  // Next signal once the kernel could hold `high` bytes if the destination wrote nothing more.
  if (absl::Status st = link_.SetMark(src_, last_.written + flow_.marks.high); !st.ok()) {
    VLOG(2) << "sockmap mark: " << st;
    return Next::kFailed;
  }
  return Next::kNothing;
}

SockmapRelay::Next SockmapRelay::Pause() {
  if (absl::Status st = link_.Pass(src_); !st.ok()) {
    VLOG(2) << "sockmap pass: " << st;
    return Next::kFailed;
  }
  state_ = State::kPaused;
  SetPaused(true);
  pump_.UseCopy();  // the pump has held nothing since the direction was attached
  pump_.SetPsockOnly(true);
  return Poll();
}

SockmapRelay::Next SockmapRelay::StartForwarding() {
  // Bytes that reached the source while the verdict could not take them wait in its receive
  // queue: run the verdict over them now (it passes them), ahead of the pump's reads.
  if (absl::Status st = link_.Kick(src_); !st.ok()) {
    VLOG(2) << "sockmap kick: " << st;
  }
  state_ = State::kForwarding;
  return Next::kRunPump;
}

SockmapRelay::Next SockmapRelay::OnPumpIdle() {
  if (state_ != State::kForwarding) {
    return Next::kNothing;
  }
  if (!Measure()) {
    return Next::kFailed;
  }
  // The program counts what it passed since the direction was attached; the pump's count
  // before that (bytes moved before the hand-over) is not part of it.
  const uint64_t forwarded = pump_.bytes() - pump_at_attach_;
  if (last_.passed > forwarded) {
    return Next::kNothing;  // more passed bytes are on their way to the socket: EPOLLIN follows
  }
  if (last_.passed < forwarded) {
    // Cannot happen while the pump reads only what the psock holds; if it did, the program's
    // count could no longer say when the agent has caught up: keep passing, for good.
    state_ = State::kUser;
    SetPaused(false);
    return Next::kNothing;
  }
  if (last_.dst_queued > flow_.marks.low) {
    return Next::kPoll;  // resuming now would pause again at once
  }
  if (absl::Status st = link_.Resume(src_, forwarded, last_.written + flow_.marks.high); !st.ok()) {
    VLOG(2) << "sockmap resume: " << st;
    return Next::kFailed;
  }
  state_ = State::kResuming;
  return Next::kPoll;
}

SockmapRelay::Next SockmapRelay::OnSrcEof() {
  switch (state_) {
    case State::kPending:
      state_ = State::kUser;  // never attached: the pump has the whole direction
      return Next::kNothing;
    case State::kForwarding:
      // Nothing is in flight (forwarding starts only then) and nothing more will be
      // redirected: the pump reads the rest and the EOF (no verdict runs after the FIN, so
      // reading the receive queue is safe now).
      state_ = State::kUser;
      SetPaused(false);
      pump_.SetPsockOnly(false);
      return Next::kRunPump;
    case State::kAttached:
    case State::kPaused:
    case State::kResuming:
      state_ = State::kDraining;
      SetPaused(false);
      return Poll();
    case State::kUser:
      pump_.SetPsockOnly(false);  // no verdict runs after the FIN: the pump may see the EOF
      return Next::kNothing;
    case State::kDraining:
      return Next::kNothing;
  }
  return Next::kNothing;
}

SockmapRelay::Next SockmapRelay::Poll() {
  switch (state_) {
    case State::kPending:
    case State::kAttached:
    case State::kUser:
      return Next::kNothing;
    case State::kForwarding:
      return pump_.pending() == 0 && pump_.src_drained() ? OnPumpIdle() : Next::kNothing;
    case State::kPaused:
    case State::kDraining:
    case State::kResuming:
      break;
  }
  if (!Measure()) {
    return Next::kFailed;
  }
  if (state_ == State::kResuming) {
    if (last_.passed == pump_.bytes() - pump_at_attach_) {
      state_ = State::kAttached;  // the program redirects again
      SetPaused(false);
      return Next::kStopPump;
    }
    return StartForwarding();  // a byte was passed after the pump's last read
  }
  if (last_.in_flight() > 0) {
    return Next::kPoll;
  }
  if (state_ == State::kPaused) {
    return StartForwarding();
  }
  state_ = State::kUser;  // kDraining: every redirected byte reached the destination
  pump_.UseCopy();
  pump_.SetPsockOnly(false);
  return Next::kRunPump;
}

bool SockmapRelay::Progressed() {
  if (!kernel() && state_ != State::kForwarding) {
    return false;
  }
  if (!Measure()) {
    return false;
  }
  const uint64_t mark = last_.consumed + last_.written + last_.passed;
  const bool moved = mark != idle_mark_;
  idle_mark_ = mark;
  return moved;
}

}  // namespace sluice::proxy
