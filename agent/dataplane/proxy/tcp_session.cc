// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/tcp_session.h"

#include <errno.h>
#include <sys/socket.h>

#include <cstring>

#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/socket.h"

namespace sluice::proxy {
namespace {

// EPOLLET: the pumps keep their own readiness flags and drain to EAGAIN, so each edge needs no
// epoll_ctl to re-arm or to toggle EPOLLOUT (man 7 epoll). EPOLLRDHUP makes a peer's FIN an edge
// even when it carries no data.
constexpr uint32_t kSocketEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;

CloseReason ResetOf(fastpath::Side side) {
  return side == fastpath::Side::kClient ? CloseReason::kClientReset : CloseReason::kBackendReset;
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
      client_(std::move(client)),
      backend_(std::move(backend)),
      upstream_(client_.get(), backend_.get(), pool, options.use_splice),
      downstream_(backend_.get(), client_.get(), pool, options.use_splice),
      sockmap_(sockmap == nullptr ? nullptr
                                  : std::make_unique<SockmapSession>(
                                        loop, *sockmap, client_.get(), backend_.get(), upstream_,
                                        downstream_, static_cast<SockmapSessionCallbacks&>(*this))),
      last_activity_(loop.MonotonicNow()) {}

TcpSession::~TcpSession() {
  // The sockets close right after (members): closing leaves the epoll set, no EPOLL_CTL_DEL.
  for (auto* event : {client_event_.get(), backend_event_.get()}) {
    if (event != nullptr) {
      event->Detach();
    }
  }
}

absl::Status TcpSession::Start(bool sockmap_at_start) {
  if (sockmap_ != nullptr) {
    sockmap_->Start(sockmap_at_start);
  }
  // Registration reports the current readiness as the first edge, so data that arrived before
  // the session existed (a backend that speaks first) is not missed.
  using fastpath::Side;
  ASSIGN_OR_RETURN(client_event_,
                   loop_.Watch(client_.get(), SocketEvents(Side::kClient),
                               [this](uint32_t ev) { OnSocketEvents(Side::kClient, ev); }));
  // The dialer leaves the backend in epoll: one EPOLL_CTL_MOD takes it over.
  ASSIGN_OR_RETURN(backend_event_,
                   loop_.Adopt(backend_.get(), SocketEvents(Side::kBackend),
                               [this](uint32_t ev) { OnSocketEvents(Side::kBackend, ev); }));
  idle_timer_ = loop_.CreateTimer([this] { OnIdleTimer(); });
  idle_timer_->Arm(idle_timeout_);
  return absl::OkStatus();
}

// A kernel direction needs no readiness at all: its source's FIN (EPOLLRDHUP) and errors are
// all the session must see, and leaving EPOLLIN/EPOLLOUT out spares the worker a wakeup per
// segment the kernel moves. A pump needs EPOLLIN on its source and EPOLLOUT on its destination.
uint32_t TcpSession::SocketEvents(fastpath::Side side) const {
  if (!Kernel(fastpath::Side::kClient) && !Kernel(fastpath::Side::kBackend)) {
    return kSocketEvents;
  }
  const bool reads = !Kernel(side);
  const bool writes = !Kernel(fastpath::Other(side));
  return EPOLLRDHUP | EPOLLET | (reads ? EPOLLIN : 0u) | (writes ? EPOLLOUT : 0u);
}

void TcpSession::OnDirectionsChanged() {
  if (client_event_ == nullptr) {
    return;  // Start() registers with the right events
  }
  // EPOLL_CTL_MOD re-arms the edge: the pump that just took over hears the current readiness.
  (void)client_event_->Modify(SocketEvents(fastpath::Side::kClient));  // cannot fail once added
  (void)backend_event_->Modify(SocketEvents(fastpath::Side::kBackend));
}

void TcpSession::OnSockmapFailed(fastpath::Side src) { Close(ResetOf(src)); }

TcpSession::Path TcpSession::path() const {
  if (sockmap_ != nullptr && sockmap_->used()) {
    return Path::kSockmap;
  }
  return upstream_.path() == SplicePump::Path::kCopy ||
                 downstream_.path() == SplicePump::Path::kCopy
             ? Path::kCopy
             : Path::kSplice;
}

std::string TcpSession::DirectionState(bool upstream) const {
  const SplicePump& pump = upstream ? upstream_ : downstream_;
  const char* pump_path = pump.path() == SplicePump::Path::kCopy ? "copy" : "splice";
  if (sockmap_ == nullptr) {
    return pump_path;
  }
  return sockmap_->DirectionState(upstream ? fastpath::Side::kClient : fastpath::Side::kBackend,
                                  pump_path);
}

void TcpSession::OnSocketEvents(fastpath::Side side, uint32_t events) {
  const int fd = side == fastpath::Side::kClient ? client_.get() : backend_.get();
  if (closed_ || !CheckSocketError(events, fd, ResetOf(side))) {
    return;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP)) && sockmap_ != nullptr && !sockmap_->OnSrcEof(side)) {
    return;
  }
  if (events & (EPOLLRDHUP | EPOLLHUP)) {
    Pump(side).OnSrcFin();
  } else if (events & EPOLLIN) {
    Pump(side).OnSrcReadable();
  }
  if (events & (EPOLLOUT | EPOLLHUP)) {
    Pump(fastpath::Other(side)).OnDstWritable();
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
  if (!Step(fastpath::Side::kClient, yielded) || !Step(fastpath::Side::kBackend, yielded)) {
    return;
  }
  const bool moved = bytes_to_backend() + bytes_to_client() != before;
  if (moved) {
    // Cheaper than re-arming the timer per event: OnIdleTimer re-arms for the remainder.
    last_activity_ = loop_.MonotonicNow();
  }
  if (sockmap_ != nullptr && !sockmap_->AfterPumps()) {
    return;
  }
  if (upstream_.finished() && downstream_.finished()) {
    Close(CloseReason::kDone);
  } else if (yielded) {
    client_event_->Activate(0);  // no new edge will come for data already queued
  }
}

bool TcpSession::Step(fastpath::Side src, bool& yielded) {
  SplicePump& pump = Pump(src);
  if (pump.finished() || Kernel(src)) {
    return true;
  }
  const int dst_fd = src == fastpath::Side::kClient ? backend_.get() : client_.get();
  switch (pump.Pump()) {
    case SplicePump::Result::kWaiting:
      return true;
    case SplicePump::Result::kYield:
      yielded = true;
      return true;
    case SplicePump::Result::kEof:
      if (Pump(fastpath::Other(src)).finished() && !Kernel(fastpath::Other(src))) {
        // The last direction: the session closes both sockets now (kDone), and close() sends
        // this FIN. dst's own stream ended, so nothing unread makes close() send a RST instead.
        return true;
      }
      // ENOTCONN: the peer is already gone; its reset reaches us as an error event.
      if (shutdown(dst_fd, SHUT_WR) != 0 && errno != ENOTCONN) {
        VLOG(2) << "shutdown(fd " << dst_fd << ", SHUT_WR): " << strerror(errno);
        Close(ResetOf(fastpath::Other(src)));
        return false;
      }
      return true;
    case SplicePump::Result::kError:
      VLOG(2) << (pump.error_at_src() ? "read: " : "write: ") << strerror(pump.error());
      Close(ResetOf(pump.error_at_src() ? src : fastpath::Other(src)));
      return false;
  }
  return true;
}

void TcpSession::OnIdleTimer() {
  if (closed_) {
    return;
  }
  if (sockmap_ != nullptr && sockmap_->Progressed()) {
    last_activity_ = loop_.MonotonicNow();  // the kernel moved bytes the loop never saw
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
  if (sockmap_ != nullptr) {
    sockmap_->Close();
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
