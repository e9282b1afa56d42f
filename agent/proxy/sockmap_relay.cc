// SPDX-License-Identifier: Apache-2.0
#include "agent/proxy/sockmap_relay.h"

#include "agent/base/log.h"

namespace sluice::proxy {

const char* SockmapStateName(SockmapRelay::State state) {
  switch (state) {
    case SockmapRelay::State::kPending:
      return "pending";
    case SockmapRelay::State::kAttached:
      return "attached";
    case SockmapRelay::State::kPaused:
      return "paused";
    case SockmapRelay::State::kDraining:
      return "draining";
    case SockmapRelay::State::kUser:
      return "user";
  }
  return "unknown";
}

SockmapRelay::SockmapRelay(fastpath::SockmapLink& link, fastpath::Side src, SockmapContext& context)
    : link_(link), src_(src), context_(context), state_(State::kPending) {}

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
  return true;
}

SockmapRelay::~SockmapRelay() { SetPaused(false); }

void SockmapRelay::SetPaused(bool paused) {
  if (paused == (state_ == State::kPaused)) {
    return;
  }
  if (paused) {
    state_ = State::kPaused;
    context_.paused.Add(1);
    context_.pauses.Inc();
  } else {
    context_.paused.Add(-1);
  }
}

SockmapRelay::Next SockmapRelay::OnSignal() {
  if (state_ != State::kAttached) {
    return Next::kNothing;  // a signal raised just before the source was detached
  }
  auto p = link_.Measure(src_);
  if (!p.ok()) {
    VLOG(2) << "sockmap measure: " << p.status();
    return Next::kFailed;
  }
  last_ = *p;
  if (p->in_flight() > context_.marks.high) {
    link_.Detach(src_);
    SetPaused(true);
    return Next::kPoll;
  }
  // Next signal once the kernel could hold `high` bytes if the destination wrote nothing more.
  if (absl::Status st = link_.SetMark(src_, p->written + context_.marks.high); !st.ok()) {
    VLOG(2) << "sockmap mark: " << st;
    return Next::kFailed;
  }
  return Next::kNothing;
}

SockmapRelay::Next SockmapRelay::OnSrcEof() {
  if (state_ == State::kPending) {
    state_ = State::kUser;  // never attached: the pump has the whole direction
    return Next::kNothing;
  }
  if (state_ == State::kUser || state_ == State::kDraining) {
    return Next::kNothing;
  }
  // Bytes the source received after this point, and the rest of its receive queue if it was
  // paused, are the pump's: a socket that is no longer ESTABLISHED cannot be attached again.
  link_.Detach(src_);
  SetPaused(false);
  state_ = State::kDraining;
  return Drain();
}

SockmapRelay::Next SockmapRelay::Poll() {
  switch (state_) {
    case State::kPending:
    case State::kAttached:
    case State::kUser:
      return Next::kNothing;
    case State::kDraining:
      return Drain();
    case State::kPaused:
      break;
  }
  auto p = link_.Measure(src_);
  if (!p.ok()) {
    VLOG(2) << "sockmap measure: " << p.status();
    return Next::kFailed;
  }
  last_ = *p;
  if (p->in_flight() > context_.marks.low) {
    return Next::kPoll;
  }
  if (absl::Status st = link_.SetMark(src_, p->written + context_.marks.high); !st.ok()) {
    VLOG(2) << "sockmap mark: " << st;
    return Next::kFailed;
  }
  SetPaused(false);
  if (absl::Status st = link_.Attach(src_); !st.ok()) {
    // EOPNOTSUPP: the source got its FIN (or was reset) while paused. Its EOF edge may already
    // have been reported, so drain now; an error edge, if any, resets the session anyway.
    VLOG(2) << "sockmap resume: " << st;
    state_ = State::kDraining;
    return Drain();
  }
  state_ = State::kAttached;
  return Next::kNothing;
}

SockmapRelay::Next SockmapRelay::Drain() {
  auto p = link_.Measure(src_);
  if (!p.ok()) {
    VLOG(2) << "sockmap measure: " << p.status();
    return Next::kFailed;
  }
  last_ = *p;
  if (p->in_flight() > 0) {
    return Next::kPoll;
  }
  state_ = State::kUser;
  return Next::kHandOff;
}

bool SockmapRelay::Progressed() {
  if (!kernel()) {
    return false;
  }
  auto p = link_.Measure(src_);
  if (!p.ok()) {
    return false;
  }
  last_ = *p;
  const uint64_t mark = p->consumed + p->written;
  const bool moved = mark != idle_mark_;
  idle_mark_ = mark;
  return moved;
}

}  // namespace sluice::proxy
