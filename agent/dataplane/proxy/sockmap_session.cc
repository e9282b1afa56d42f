// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/sockmap_session.h"

#include <algorithm>

#include "lib/base/log.h"

namespace sluice::proxy {
namespace {

using fastpath::Side;

// Paused and draining kernel directions are polled, starting at 1 ms (a 10 Gbit/s stream fills
// the 512 KiB low watermark's worth of headroom in about 0.4 ms) and backing off while nothing
// moves, so a stalled backend costs a wakeup per 32 ms, not per millisecond.
constexpr absl::Duration kPollFirst = absl::Milliseconds(1);
constexpr absl::Duration kPollMax = absl::Milliseconds(32);

constexpr Side kSides[] = {Side::kClient, Side::kBackend};

}  // namespace

void SockmapContext::Dispatch(uint64_t cookie) {
  if (auto it = sessions.find(cookie); it != sessions.end()) {
    it->second->OnSignal(cookie);
  }
}

SockmapSession::SockmapSession(event::EventLoop& loop, SockmapContext& context, int client_fd,
                               int backend_fd, SplicePump& upstream, SplicePump& downstream,
                               SockmapSessionCallbacks& callbacks)
    : loop_(loop),
      context_(context),
      callbacks_(callbacks),
      client_fd_(client_fd),
      backend_fd_(backend_fd),
      pumps_{&upstream, &downstream} {}

SockmapSession::~SockmapSession() {
  if (link_ != nullptr) {
    for (Side s : kSides) {
      context_.sessions.erase(link_->cookie(s));
    }
  }
}

void SockmapSession::Start(bool at_start) {
  if (at_start) {
    Enrol();
    return;
  }
  promote_timer_ = loop_.CreateTimer([this] { OnPromoteTimer(); });
  window_start_ = loop_.MonotonicNow();
  promote_timer_->Arm(context_.promotion.age);
}

void SockmapSession::OnPromoteTimer() {
  if (closed_ || pump(Side::kClient).finished() || pump(Side::kBackend).finished()) {
    return;
  }
  const base::MonoTime now = loop_.MonotonicNow();
  const uint64_t bytes = PumpBytes();
  if (context_.promotion.Quiet(bytes - window_bytes_, now - window_start_)) {
    Enrol();
    return;
  }
  window_start_ = now;
  window_bytes_ = bytes;
  promote_timer_->Arm(context_.promotion.recheck);
}

void SockmapSession::Enrol() {
  auto link = fastpath::SockmapLink::Enrol(context_.fast_path, client_fd_, backend_fd_,
                                           context_.ring, context_.flow.marks.high);
  if (!link.ok()) {
    fallback_ = fastpath::FallbackFor(link.status());
    VLOG(2) << "sockmap enrol: " << link.status();
    return;
  }
  link_ = std::move(*link);
  for (Side s : kSides) {
    relays_[Index(s)] = std::make_unique<SockmapRelay>(*link_, s, pump(s), context_.flow);
    context_.sessions[link_->cookie(s)] = this;
  }
  poll_timer_ = loop_.CreateTimer([this] { OnPollTimer(); });
  AttachReady();
}

void SockmapSession::AttachReady() {
  bool attached = false;
  for (Side s : kSides) {
    SockmapRelay& relay = *relays_[Index(s)];
    const SplicePump& p = pump(s);
    if (relay.state() != SockmapRelay::State::kPending || p.finished()) {
      continue;
    }
    // Bytes in the pump's pipe would be overtaken by the kernel, and an skb the pump read in
    // part would be redirected whole (tcp_read_skb ignores the read offset): hand over only
    // between reads that emptied the socket. A pump that never catches up keeps the direction,
    // which splice then serves with its natural backpressure.
    if (p.pending() == 0 && p.src_drained()) {
      attached |= relay.Attach();
    }
  }
  if (attached) {
    used_ = true;
    callbacks_.OnDirectionsChanged();
  }
}

bool SockmapSession::AfterPumps() {
  if (link_ == nullptr) {
    return true;
  }
  if (relays_[0]->state() == SockmapRelay::State::kPending ||
      relays_[1]->state() == SockmapRelay::State::kPending) {
    AttachReady();
  }
  return ForwardersIdle();
}

bool SockmapSession::OnSrcEof(Side src) {
  return relays_[Index(src)] == nullptr || Follow(relays_[Index(src)]->OnSrcEof(), src);
}

void SockmapSession::OnSignal(uint64_t cookie) {
  if (closed_ || link_ == nullptr) {
    return;
  }
  const Side src = cookie == link_->cookie(Side::kClient) ? Side::kClient : Side::kBackend;
  if (Follow(relays_[Index(src)]->OnSignal(), src)) {
    callbacks_.OnPumpsDue();
  }
}

bool SockmapSession::Follow(SockmapRelay::Next next, Side src) {
  switch (next) {
    case SockmapRelay::Next::kNothing:
      return true;
    case SockmapRelay::Next::kPoll:
      if (!poll_timer_->armed()) {
        poll_interval_ = kPollFirst;
        poll_timer_->Arm(poll_interval_);
      }
      return true;
    case SockmapRelay::Next::kRunPump:
      // The pump starts with both flags up; a spurious attempt only returns EAGAIN.
      pump(src).OnSrcReadable();
      pump(src).OnDstWritable();
      callbacks_.OnDirectionsChanged();
      return true;
    case SockmapRelay::Next::kStopPump:
      callbacks_.OnDirectionsChanged();
      return true;
    case SockmapRelay::Next::kFailed:
      callbacks_.OnSockmapFailed(src);
      return false;
  }
  return true;
}

void SockmapSession::OnPollTimer() {
  if (closed_) {
    return;
  }
  bool again = false, moved = false;
  for (Side s : kSides) {
    SockmapRelay& relay = *relays_[Index(s)];
    const uint64_t before = relay.written();
    SockmapRelay::Next next = relay.Poll();
    moved |= relay.written() != before;
    if (next == SockmapRelay::Next::kPoll) {
      again = true;
    } else if (!Follow(next, s)) {
      return;
    }
  }
  if (again) {
    poll_interval_ = moved ? kPollFirst : std::min(2 * poll_interval_, kPollMax);
    poll_timer_->Arm(poll_interval_);
  }
  callbacks_.OnPumpsDue();
}

bool SockmapSession::ForwardersIdle() {
  for (Side s : kSides) {
    SockmapRelay& relay = *relays_[Index(s)];
    // Poll() knows when a forwarding pump counts as idle.
    if (relay.state() == SockmapRelay::State::kForwarding && !Follow(relay.Poll(), s)) {
      return false;
    }
  }
  return true;
}

bool SockmapSession::Progressed() {
  bool moved = false;
  for (auto& relay : relays_) {
    if (relay != nullptr && relay->Progressed()) {
      moved = true;
    }
  }
  return moved;
}

void SockmapSession::Close() {
  closed_ = true;
  for (event::Timer* t : {poll_timer_.get(), promote_timer_.get()}) {
    if (t != nullptr) {
      t->Disarm();
    }
  }
  (void)Progressed();  // final kernel byte counts for the owner's metrics
}

uint64_t SockmapSession::repeated() const {
  uint64_t n = 0;
  for (const auto& relay : relays_) {
    n += relay != nullptr ? relay->repeated() : 0;
  }
  return n;
}

std::string SockmapSession::DirectionState(Side src, const char* pump_path) const {
  const SockmapRelay* relay = relays_[Index(src)].get();
  if (relay == nullptr) {
    return pump_path;
  }
  if (relay->kernel() || relay->state() == SockmapRelay::State::kForwarding) {
    return SockmapStateName(relay->state());
  }
  return std::string("user:") + pump_path;
}

}  // namespace sluice::proxy
