// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

#include "agent/dataplane/proxy/pipe_pool.h"
#include "agent/dataplane/proxy/sockmap_session.h"
#include "agent/dataplane/proxy/splice_pump.h"

namespace sluice::proxy {

class TcpSession;

enum class CloseReason {
  kDone,          // both directions ended with FIN and every byte was delivered
  kClientReset,   // the client side failed (RST, EPIPE); the backend was reset
  kBackendReset,  // the backend side failed; the client was reset
  kIdleTimeout,   // no byte moved for idle_timeout; both sides were reset
  kAborted,       // the owner called Abort(); both sides were reset
};

const char* CloseReasonName(CloseReason reason);

// What a TcpSession reports to its owner. Held by reference; must outlive the session.
class TcpSessionCallbacks {
 public:
  virtual ~TcpSessionCallbacks() = default;
  // Called exactly once, on the loop thread. The owner then hands the session to
  // EventLoop::DeferDelete; it must not destroy it inside this call. The sockets close (with RST
  // unless kDone) when the session is destroyed.
  virtual void OnSessionClosed(TcpSession& session, CloseReason reason) = 0;
};

// One proxied TCP connection: owns the accepted client socket and the connected backend socket
// and moves each direction with a SplicePump on edge-triggered readiness. When the worker has the
// sockmap fast path, its SockmapSession may hand a direction to the kernel, and the pump then
// moves only what the kernel leaves to it. A FIN is forwarded as shutdown(SHUT_WR) once that
// direction holds no bytes; a failure on either side resets both (SO_LINGER 0); an idle timer
// resets both after options.idle_timeout without traffic.
// Thread: owning worker loop.
class TcpSession final : public event::DeferredDeletable, private SockmapSessionCallbacks {
 public:
  struct Options {
    // kube-proxy's userspace proxier had no TCP idle timeout; an hour bounds leaked connections
    // whose peer vanished without FIN or RST, like conntrack's established timeout does.
    absl::Duration idle_timeout = absl::Hours(1);
    bool use_splice = true;  // false: copy I/O for every connection (a --no-splice knob)
  };
  // The data path a connection used, for the per-path counters.
  enum class Path { kSockmap, kSplice, kCopy };

  // Both fds must be non-blocking connected TCP sockets with TCP_NODELAY (not checked: that
  // would cost syscalls per connection; net::ListenTcp's accepted sockets inherit it and
  // net::DialTcp sets it). `backend` may still be in the loop's epoll set from the dialer's
  // detached watch (it is adopted). Starts forwarding at once. With a `sockmap` context (not owned;
  // outlives the session) the connection is enrolled in the fast path at once if
  // `sockmap_at_start`, else when it outgrows SockmapPromotion; if the kernel refuses the
  // sockets it stays on splice (see fallback()).
  static absl::StatusOr<std::unique_ptr<TcpSession>> Create(
      event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
      const Options& options, TcpSessionCallbacks& callbacks, SockmapContext* sockmap = nullptr,
      bool sockmap_at_start = false);
  ~TcpSession() override;

  // Resets both sides now and reports kAborted from within this call. No-op once closed.
  void Abort();

  bool closed() const { return closed_; }
  uint64_t bytes_to_backend() const { return upstream_.bytes() + kernel_bytes_to_backend(); }
  uint64_t bytes_to_client() const { return downstream_.bytes() + kernel_bytes_to_client(); }
  // Of those, the bytes the kernel redirected (the rest went through the pumps).
  uint64_t kernel_bytes_to_backend() const { return KernelBytes(fastpath::Side::kClient); }
  uint64_t kernel_bytes_to_client() const { return KernelBytes(fastpath::Side::kBackend); }
  uint64_t kernel_bytes_repeated() const { return sockmap_ ? sockmap_->repeated() : 0; }
  // kSockmap once a direction was handed to the kernel (even if some bytes went through the
  // pumps).
  Path path() const;
  // The pump's I/O for one direction (what moved the bytes the kernel did not).
  SplicePump::Path pump_path(bool upstream) const {
    return (upstream ? upstream_ : downstream_).path();
  }
  // Why a session that tried to enrol stayed on splice.
  std::optional<fastpath::Fallback> fallback() const {
    return sockmap_ ? sockmap_->fallback() : std::nullopt;
  }
  // A kernel direction's state ("attached", "paused", "forwarding", "resuming", "draining",
  // "pending"), "user:splice"/"user:copy" once its pump has it for good, or "splice"/"copy"
  // for a connection that was never enrolled.
  std::string DirectionState(bool upstream) const;

 private:
  TcpSession(event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
             const Options& options, TcpSessionCallbacks& callbacks, SockmapContext* sockmap);
  absl::Status Start(bool sockmap_at_start);
  uint64_t KernelBytes(fastpath::Side src) const {
    return sockmap_ ? sockmap_->kernel_bytes(src) : 0;
  }
  bool Kernel(fastpath::Side src) const { return sockmap_ && sockmap_->kernel(src); }
  // The pump of the direction whose source is `src`.
  SplicePump& Pump(fastpath::Side src) {
    return src == fastpath::Side::kClient ? upstream_ : downstream_;
  }
  uint32_t SocketEvents(fastpath::Side side) const;
  void OnSocketEvents(fastpath::Side side, uint32_t events);
  // Returns false if the session closed.
  bool CheckSocketError(uint32_t events, int fd, CloseReason reason);
  void RunPumps();
  // Runs `src`'s pump unless the kernel has the direction. Returns false if the session closed.
  bool Step(fastpath::Side src, bool& yielded);
  void OnIdleTimer();
  void Close(CloseReason reason);

  // SockmapSessionCallbacks
  void OnDirectionsChanged() override;
  void OnPumpsDue() override { RunPumps(); }
  void OnSockmapFailed(fastpath::Side src) override;

  event::EventLoop& loop_;
  TcpSessionCallbacks& callbacks_;
  const absl::Duration idle_timeout_;
  // Declared before the pumps and events, so they close last: FileEvents must unregister first.
  base::UniqueFd client_;
  base::UniqueFd backend_;
  SplicePump upstream_;    // client -> backend
  SplicePump downstream_;  // backend -> client
  // After the sockets: the map entries go before the sockets close. Null without the fast path.
  std::unique_ptr<SockmapSession> sockmap_;
  std::unique_ptr<event::FileEvent> client_event_;
  std::unique_ptr<event::FileEvent> backend_event_;
  std::unique_ptr<event::Timer> idle_timer_;
  base::MonoTime last_activity_;
  bool closed_ = false;
};

// "sockmap", "splice" or "copy": the path label of the per-path metrics.
const char* PathName(TcpSession::Path path);

}  // namespace sluice::proxy
