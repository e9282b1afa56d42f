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

absl::StatusOr<std::unique_ptr<TcpSession>> TcpSession::Create(
    event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
    const Options& options, TcpSessionCallbacks& callbacks) {
  RETURN_IF_ERROR(CheckNonBlocking(client.get(), "client"));
  RETURN_IF_ERROR(CheckNonBlocking(backend.get(), "backend"));
  RETURN_IF_ERROR(net::SetTcpNoDelay(client.get()));
  RETURN_IF_ERROR(net::SetTcpNoDelay(backend.get()));
  std::unique_ptr<TcpSession> session(
      new TcpSession(loop, pool, std::move(client), std::move(backend), options, callbacks));
  RETURN_IF_ERROR(session->Start());
  return session;
}

TcpSession::TcpSession(event::EventLoop& loop, PipePool& pool, base::UniqueFd client,
                       base::UniqueFd backend, const Options& options,
                       TcpSessionCallbacks& callbacks)
    : loop_(loop),
      callbacks_(callbacks),
      idle_timeout_(options.idle_timeout),
      client_(std::move(client)),
      backend_(std::move(backend)),
      upstream_(client_.get(), backend_.get(), pool, options.use_splice),
      downstream_(backend_.get(), client_.get(), pool, options.use_splice),
      last_activity_(loop.MonotonicNow()) {}

TcpSession::~TcpSession() = default;

absl::Status TcpSession::Start() {
  // Registration reports the current readiness as the first edge, so data that arrived before
  // the session existed (a backend that speaks first) is not missed.
  ASSIGN_OR_RETURN(client_event_, loop_.Watch(client_.get(), kSocketEvents,
                                              [this](uint32_t ev) { OnClientEvents(ev); }));
  ASSIGN_OR_RETURN(backend_event_, loop_.Watch(backend_.get(), kSocketEvents,
                                               [this](uint32_t ev) { OnBackendEvents(ev); }));
  idle_timer_ = loop_.CreateTimer([this] { OnIdleTimer(); });
  idle_timer_->Arm(idle_timeout_);
  return absl::OkStatus();
}

SplicePump::Path TcpSession::path() const {
  return upstream_.path() == SplicePump::Path::kCopy ||
                 downstream_.path() == SplicePump::Path::kCopy
             ? SplicePump::Path::kCopy
             : SplicePump::Path::kSplice;
}

void TcpSession::OnClientEvents(uint32_t events) {
  if (closed_ || !CheckSocketError(events, client_.get(), CloseReason::kClientReset)) {
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
  if (!Step(upstream_, upstream_done_, backend_.get(), CloseReason::kClientReset,
            CloseReason::kBackendReset, yielded) ||
      !Step(downstream_, downstream_done_, client_.get(), CloseReason::kBackendReset,
            CloseReason::kClientReset, yielded)) {
    return;
  }
  if (bytes_to_backend() + bytes_to_client() != before) {
    // Cheaper than re-arming the timer per event: OnIdleTimer re-arms for the remainder.
    last_activity_ = loop_.MonotonicNow();
  }
  if (upstream_done_ && downstream_done_) {
    Close(CloseReason::kDone);
  } else if (yielded) {
    client_event_->Activate(0);  // no new edge will come for data already queued
  }
}

bool TcpSession::Step(SplicePump& pump, bool& done, int dst_fd, CloseReason src_failed,
                      CloseReason dst_failed, bool& yielded) {
  if (done) {
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

void TcpSession::OnIdleTimer() {
  if (closed_) {
    return;
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
