// SPDX-License-Identifier: Apache-2.0
#include "agent/proxy/tcp_session.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>

#include <cstring>

#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/net/socket.h"

namespace sluice::proxy {
namespace {

// EPOLLET: the pumps keep their own readiness flags and drain to EAGAIN, so each edge needs no
// epoll_ctl to re-arm or to toggle EPOLLOUT (man 7 epoll). EPOLLRDHUP makes a peer's FIN an edge
// even when it carries no data.
constexpr uint32_t kSocketEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

// Paused and draining kernel directions are polled, starting at 1 ms (a 10 Gbit/s stream fills
// the 512 KiB low watermark's worth of headroom in about 0.4 ms) and backing off while nothing
// moves, so a stalled backend costs a wakeup per 32 ms, not per millisecond.
constexpr absl::Duration kPollFirst = absl::Milliseconds(1);
constexpr absl::Duration kPollMax = absl::Milliseconds(32);

absl::Status CheckNonBlocking(int fd, const char* which) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) {
    return base::ErrnoStatus(errno, std::string("fcntl(F_GETFL ") + which + ")");
  }
  if ((flags & O_NONBLOCK) == 0) {
    return absl::InvalidArgumentError(std::string(which) + " socket is blocking");
  }
  return absl::OkStatus();
}

}  // namespace

const char* CloseReasonName(CloseReason reason) {
  switch (reason) {
    case CloseReason::kDone:
      return "done";
    case CloseReason::kClientReset:
      return "client_reset";
    case CloseReason::kBackendReset:
      return "backend_reset";
    case CloseReason::kIdleTimeout:
      return "idle_timeout";
    case CloseReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

const char* PathName(TcpSession::Path path) {
  switch (path) {
    case TcpSession::Path::kSockmap:
      return "sockmap";
    case TcpSession::Path::kSplice:
      return "splice";
    case TcpSession::Path::kCopy:
      return "copy";
  }
  return "splice";
}

absl::StatusOr<std::unique_ptr<TcpSession>> TcpSession::Create(
    event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
    const Options& options, TcpSessionCallbacks& callbacks, SockmapContext* sockmap,
    bool sockmap_at_start) {
  RETURN_IF_ERROR(CheckNonBlocking(client.get(), "client"));
  RETURN_IF_ERROR(CheckNonBlocking(backend.get(), "backend"));
  RETURN_IF_ERROR(net::SetTcpNoDelay(client.get()));
  RETURN_IF_ERROR(net::SetTcpNoDelay(backend.get()));
  std::unique_ptr<TcpSession> session(new TcpSession(
      loop, pool, std::move(client), std::move(backend), options, callbacks, sockmap));
  RETURN_IF_ERROR(session->Start(sockmap_at_start));
  return session;
}

TcpSession::TcpSession(event::EventLoop& loop, PipePool& pool, base::UniqueFd client,
                       base::UniqueFd backend, const Options& options,
                       TcpSessionCallbacks& callbacks, SockmapContext* sockmap)
    : loop_(loop),
      callbacks_(callbacks),
      idle_timeout_(options.idle_timeout),
      sockmap_(sockmap),
      client_(std::move(client)),
      backend_(std::move(backend)),
      upstream_(client_.get(), backend_.get(), pool, options.use_splice),
      downstream_(backend_.get(), client_.get(), pool, options.use_splice),
      last_activity_(loop.MonotonicNow()) {}

TcpSession::~TcpSession() {
  if (link_ != nullptr) {
    sockmap_->sessions.erase(link_->cookie(fastpath::Side::kClient));
    sockmap_->sessions.erase(link_->cookie(fastpath::Side::kBackend));
  }
}

absl::Status TcpSession::Start(bool sockmap_at_start) {
  if (sockmap_ != nullptr) {
    promote_timer_ = loop_.CreateTimer([this] {
      promote_due_ = true;
      MaybePromote();
    });
    if (sockmap_at_start) {
      Enrol();  // before the pumps read anything: both directions attach at once
    } else {
      promote_timer_->Arm(sockmap_->promotion.age);
    }
  }
  // Registration reports the current readiness as the first edge, so data that arrived before
  // the session existed (a backend that speaks first) is not missed.
  ASSIGN_OR_RETURN(client_event_, loop_.Watch(client_.get(), SocketEvents(true),
                                              [this](uint32_t ev) { OnClientEvents(ev); }));
  ASSIGN_OR_RETURN(backend_event_, loop_.Watch(backend_.get(), SocketEvents(false),
                                               [this](uint32_t ev) { OnBackendEvents(ev); }));
  idle_timer_ = loop_.CreateTimer([this] { OnIdleTimer(); });
  idle_timer_->Arm(idle_timeout_);
  return absl::OkStatus();
}

void TcpSession::MaybePromote() {
  if (closed_ || link_ != nullptr || fallback_.has_value() || upstream_done_ || downstream_done_) {
    return;
  }
  promote_due_ |= bytes_to_backend() + bytes_to_client() >= sockmap_->promotion.bytes;
  if (!promote_due_) {
    return;
  }
  promote_timer_->Disarm();
  Enrol();
}

void TcpSession::Enrol() {
  auto link = fastpath::SockmapLink::Enrol(sockmap_->fast_path, client_.get(), backend_.get(),
                                           sockmap_->ring, sockmap_->marks.high);
  if (!link.ok()) {
    fallback_ = fastpath::FallbackFor(link.status());
    VLOG(2) << "sockmap enrol: " << link.status();
    return;
  }
  link_ = std::move(*link);
  up_relay_ = std::make_unique<SockmapRelay>(*link_, fastpath::Side::kClient, upstream_, *sockmap_);
  down_relay_ =
      std::make_unique<SockmapRelay>(*link_, fastpath::Side::kBackend, downstream_, *sockmap_);
  sockmap_->sessions[link_->cookie(fastpath::Side::kClient)] = this;
  sockmap_->sessions[link_->cookie(fastpath::Side::kBackend)] = this;
  poll_timer_ = loop_.CreateTimer([this] { OnPollTimer(); });
  AttachReady();
}

void TcpSession::AttachReady() {
  bool attached = false;
  for (bool up : {true, false}) {
    SockmapRelay& relay = up ? *up_relay_ : *down_relay_;
    const SplicePump& pump = up ? upstream_ : downstream_;
    if (relay.state() != SockmapRelay::State::kPending ||
        (up ? upstream_done_ : downstream_done_)) {
      continue;
    }
    // Bytes in the pump's pipe would be overtaken by the kernel, and an skb the pump read in
    // part would be redirected whole (tcp_read_skb ignores the read offset): hand over only
    // between reads that emptied the socket. A pump that never catches up keeps the direction,
    // which splice then serves with its natural backpressure.
    if (pump.pending() == 0 && pump.src_drained()) {
      attached |= relay.Attach();
    }
  }
  if (attached) {
    kernel_used_ = true;
    if (client_event_ != nullptr) {  // else Start() registers with the right events
      UpdateSocketEvents();
    }
  }
}

// A kernel direction needs no readiness at all: its source's FIN (EPOLLRDHUP) and errors are
// all the session must see, and leaving EPOLLIN/EPOLLOUT out spares the worker a wakeup per
// segment the kernel moves. A pump needs EPOLLIN on its source and EPOLLOUT on its destination.
uint32_t TcpSession::SocketEvents(bool client) const {
  const bool up_user = up_relay_ == nullptr || !up_relay_->kernel();
  const bool down_user = down_relay_ == nullptr || !down_relay_->kernel();
  if (up_user && down_user) {
    return kSocketEvents;
  }
  const bool reads = client ? up_user : down_user;
  const bool writes = client ? down_user : up_user;
  return EPOLLRDHUP | EPOLLET | (reads ? EPOLLIN : 0u) | (writes ? EPOLLOUT : 0u);
}

void TcpSession::UpdateSocketEvents() {
  // EPOLL_CTL_MOD re-arms the edge: the pump that just took over hears the current readiness.
  (void)client_event_->Modify(SocketEvents(true));  // cannot fail for a registered fd
  (void)backend_event_->Modify(SocketEvents(false));
}

TcpSession::Path TcpSession::path() const {
  if (kernel_used_) {
    return Path::kSockmap;
  }
  return upstream_.path() == SplicePump::Path::kCopy ||
                 downstream_.path() == SplicePump::Path::kCopy
             ? Path::kCopy
             : Path::kSplice;
}

std::string TcpSession::DirectionState(bool upstream) const {
  const SockmapRelay* relay = upstream ? up_relay_.get() : down_relay_.get();
  if (relay != nullptr && relay->kernel()) {
    return SockmapStateName(relay->state());
  }
  const SplicePump& pump = upstream ? upstream_ : downstream_;
  const char* pump_path = pump.path() == SplicePump::Path::kCopy ? "copy" : "splice";
  if (relay != nullptr && relay->state() == SockmapRelay::State::kForwarding) {
    return "forwarding";
  }
  return relay != nullptr ? std::string("user:") + pump_path : pump_path;
}

void TcpSession::OnSockmapSignal(uint64_t cookie) {
  if (closed_ || link_ == nullptr) {
    return;
  }
  const bool up = cookie == link_->cookie(fastpath::Side::kClient);
  SockmapRelay& relay = up ? *up_relay_ : *down_relay_;
  if (Follow(relay.OnSignal(), up ? upstream_ : downstream_,
             up ? CloseReason::kClientReset : CloseReason::kBackendReset)) {
    RunPumps();
  }
}

bool TcpSession::Follow(SockmapRelay::Next next, SplicePump& pump, CloseReason failed) {
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
      pump.OnSrcReadable();
      pump.OnDstWritable();
      UpdateSocketEvents();
      return true;
    case SockmapRelay::Next::kStopPump:
      UpdateSocketEvents();
      return true;
    case SockmapRelay::Next::kFailed:
      Close(failed);
      return false;
  }
  return true;
}

void TcpSession::OnPollTimer() {
  if (closed_) {
    return;
  }
  bool again = false, moved = false;
  for (bool up : {true, false}) {
    SockmapRelay& relay = up ? *up_relay_ : *down_relay_;
    const uint64_t before = relay.written();
    SockmapRelay::Next next = relay.Poll();
    moved |= relay.written() != before;
    if (next == SockmapRelay::Next::kPoll) {
      again = true;
    } else if (!Follow(next, up ? upstream_ : downstream_,
                       up ? CloseReason::kClientReset : CloseReason::kBackendReset)) {
      return;
    }
  }
  if (again) {
    poll_interval_ = moved ? kPollFirst : std::min(2 * poll_interval_, kPollMax);
    poll_timer_->Arm(poll_interval_);
  }
  RunPumps();
}

void TcpSession::OnClientEvents(uint32_t events) {
  if (closed_ || !CheckSocketError(events, client_.get(), CloseReason::kClientReset)) {
    return;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP)) && up_relay_ != nullptr &&
      !Follow(up_relay_->OnSrcEof(), upstream_, CloseReason::kClientReset)) {
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
    upstream_.OnSrcReadable();
  }
  if (events & (EPOLLOUT | EPOLLHUP)) {
    downstream_.OnDstWritable();
  }
  RunPumps();
}

void TcpSession::OnBackendEvents(uint32_t events) {
  if (closed_ || !CheckSocketError(events, backend_.get(), CloseReason::kBackendReset)) {
    return;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP)) && down_relay_ != nullptr &&
      !Follow(down_relay_->OnSrcEof(), downstream_, CloseReason::kBackendReset)) {
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) {
    downstream_.OnSrcReadable();
  }
  if (events & (EPOLLOUT | EPOLLHUP)) {
    upstream_.OnDstWritable();
  }
  RunPumps();
}

bool TcpSession::CheckSocketError(uint32_t events, int fd, CloseReason reason) {
  // A RST on a side whose direction already finished is seen by no pump syscall, so check here.
  if ((events & EPOLLERR) == 0) {
    return true;
  }
  int err = net::SocketError(fd);
  if (err == 0) {
    return true;
  }
  VLOG(2) << "fd " << fd << ": " << strerror(err);
  Close(reason);
  return false;
}

void TcpSession::RunPumps() {
  const uint64_t before = bytes_to_backend() + bytes_to_client();
  bool yielded = false;
  if (!Step(upstream_, up_relay_.get(), upstream_done_, backend_.get(), CloseReason::kClientReset,
            CloseReason::kBackendReset, yielded) ||
      !Step(downstream_, down_relay_.get(), downstream_done_, client_.get(),
            CloseReason::kBackendReset, CloseReason::kClientReset, yielded)) {
    return;
  }
  if (bytes_to_backend() + bytes_to_client() != before) {
    // Cheaper than re-arming the timer per event: OnIdleTimer re-arms for the remainder.
    last_activity_ = loop_.MonotonicNow();
    if (sockmap_ != nullptr && link_ == nullptr) {
      MaybePromote();
    }
  }
  if (link_ != nullptr) {
    if (up_relay_->state() == SockmapRelay::State::kPending ||
        down_relay_->state() == SockmapRelay::State::kPending) {
      AttachReady();
    }
    if (!ForwardersIdle()) {
      return;
    }
  }
  if (upstream_done_ && downstream_done_) {
    Close(CloseReason::kDone);
  } else if (yielded) {
    client_event_->Activate(0);  // no new edge will come for data already queued
  }
}

bool TcpSession::Step(SplicePump& pump, const SockmapRelay* relay, bool& done, int dst_fd,
                      CloseReason src_failed, CloseReason dst_failed, bool& yielded) {
  if (done || (relay != nullptr && relay->kernel())) {
    return true;
  }
  switch (pump.Pump()) {
    case SplicePump::Result::kWaiting:
      return true;
    case SplicePump::Result::kYield:
      yielded = true;
      return true;
    case SplicePump::Result::kEof:
      done = true;
      // ENOTCONN: the peer is already gone; its reset reaches us as an error event.
      if (shutdown(dst_fd, SHUT_WR) != 0 && errno != ENOTCONN) {
        VLOG(2) << "shutdown(fd " << dst_fd << ", SHUT_WR): " << strerror(errno);
        Close(dst_failed);
        return false;
      }
      return true;
    case SplicePump::Result::kError:
      VLOG(2) << (pump.error_at_src() ? "read: " : "write: ") << strerror(pump.error());
      Close(pump.error_at_src() ? src_failed : dst_failed);
      return false;
  }
  return true;
}

void SockmapContext::Dispatch(uint64_t cookie) {
  if (auto it = sessions.find(cookie); it != sessions.end()) {
    it->second->OnSockmapSignal(cookie);
  }
}

bool TcpSession::ForwardersIdle() {
  for (bool up : {true, false}) {
    SockmapRelay& relay = up ? *up_relay_ : *down_relay_;
    // Poll() knows when a forwarding pump counts as idle.
    if (relay.state() == SockmapRelay::State::kForwarding &&
        !Follow(relay.Poll(), up ? upstream_ : downstream_,
                up ? CloseReason::kClientReset : CloseReason::kBackendReset)) {
      return false;
    }
  }
  return true;
}

void TcpSession::OnIdleTimer() {
  if (closed_) {
    return;
  }
  for (SockmapRelay* relay : {up_relay_.get(), down_relay_.get()}) {
    if (relay != nullptr && relay->Progressed()) {
      last_activity_ = loop_.MonotonicNow();  // the kernel moved bytes the loop never saw
    }
  }
  const absl::Duration idle = loop_.MonotonicNow() - last_activity_;
  if (idle < idle_timeout_) {
    idle_timer_->Arm(idle_timeout_ - idle);
    return;
  }
  Close(CloseReason::kIdleTimeout);
}

void TcpSession::Abort() { Close(CloseReason::kAborted); }

void TcpSession::Close(CloseReason reason) {
  if (closed_) {
    return;
  }
  closed_ = true;
  idle_timer_->Disarm();
  for (event::Timer* t : {poll_timer_.get(), promote_timer_.get()}) {
    if (t != nullptr) {
      t->Disarm();
    }
  }
  for (SockmapRelay* relay : {up_relay_.get(), down_relay_.get()}) {
    if (relay != nullptr) {
      (void)relay->Progressed();  // final kernel byte counts for the owner's metrics
    }
  }
  if (reason != CloseReason::kDone) {
    // RST, not FIN, on both sides: a FIN would tell a peer its stream ended cleanly, which
    // protocols that delimit messages by close would take as a complete response.
    for (int fd : {client_.get(), backend_.get()}) {
      if (absl::Status st = net::SetLingerZero(fd); !st.ok()) {
        VLOG(2) << "fd " << fd << ": " << st;
      }
    }
  }
  callbacks_.OnSessionClosed(*this, reason);
}

}  // namespace sluice::proxy
