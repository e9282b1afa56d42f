// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "agent/base/unique_fd.h"
#include "agent/event/event_loop.h"
#include "agent/proxy/pipe_pool.h"
#include "agent/proxy/splice_pump.h"

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
// and runs a SplicePump per direction on edge-triggered readiness. A FIN is forwarded as
// shutdown(SHUT_WR) once that direction's pipe is empty; a failure on either side resets both
// (SO_LINGER 0); an idle timer resets both after options.idle_timeout without traffic.
// Thread: owning worker loop.
class TcpSession final : public event::DeferredDeletable {
 public:
  struct Options {
    // kube-proxy's userspace proxier had no TCP idle timeout; an hour bounds leaked connections
    // whose peer vanished without FIN or RST, like conntrack's established timeout does.
    absl::Duration idle_timeout = absl::Hours(1);
    bool use_splice = true;  // false: copy I/O for every connection (a --no-splice knob)
  };

  // Both fds must be non-blocking connected TCP sockets. Starts forwarding at once.
  static absl::StatusOr<std::unique_ptr<TcpSession>> Create(event::EventLoop& loop, PipePool& pool,
                                                            base::UniqueFd client,
                                                            base::UniqueFd backend,
                                                            const Options& options,
                                                            TcpSessionCallbacks& callbacks);
  ~TcpSession() override;

  // Resets both sides now and reports kAborted from within this call. No-op once closed.
  void Abort();

  bool closed() const { return closed_; }
  uint64_t bytes_to_backend() const { return upstream_.bytes(); }
  uint64_t bytes_to_client() const { return downstream_.bytes(); }
  // kCopy if either direction fell back to copy I/O (for the per-path connection counter).
  SplicePump::Path path() const;

 private:
  TcpSession(event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
             const Options& options, TcpSessionCallbacks& callbacks);
  absl::Status Start();
  void OnClientEvents(uint32_t events);
  void OnBackendEvents(uint32_t events);
  // Returns false if the session closed.
  bool CheckSocketError(uint32_t events, int fd, CloseReason reason);
  void RunPumps();
  // Returns false if the session closed.
  bool Step(SplicePump& pump, bool& done, int dst_fd, CloseReason src_failed,
            CloseReason dst_failed, bool& yielded);
  void OnIdleTimer();
  void Close(CloseReason reason);

  event::EventLoop& loop_;
  TcpSessionCallbacks& callbacks_;
  const absl::Duration idle_timeout_;
  // Declared before the pumps and events, so they close last: FileEvents must unregister first.
  base::UniqueFd client_;
  base::UniqueFd backend_;
  SplicePump upstream_;    // client -> backend
  SplicePump downstream_;  // backend -> client
  std::unique_ptr<event::FileEvent> client_event_;
  std::unique_ptr<event::FileEvent> backend_event_;
  std::unique_ptr<event::Timer> idle_timer_;
  absl::Duration last_activity_;
  bool upstream_done_ = false;
  bool downstream_done_ = false;
  bool closed_ = false;
};

}  // namespace sluice::proxy
