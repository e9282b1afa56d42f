// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "agent/base/unique_fd.h"
#include "agent/event/event_loop.h"
#include "agent/fastpath/sockmap_link.h"
#include "agent/proxy/pipe_pool.h"
#include "agent/proxy/sockmap_relay.h"
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
// and moves each direction with a SplicePump on edge-triggered readiness. When the worker has the
// sockmap fast path, a connection that outgrows SockmapPromotion is enrolled there, and each
// direction then goes through the kernel with a SockmapRelay (the pump only moves what is left
// when that direction ends). A FIN is forwarded as
// shutdown(SHUT_WR) once that direction holds no bytes; a failure on either side resets both
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
  // The data path a connection used, for the per-path counters.
  enum class Path { kSockmap, kSplice, kCopy };

  // Both fds must be non-blocking connected TCP sockets. Starts forwarding at once. With a
  // `sockmap` context (not owned; outlives the session) the connection is enrolled in the fast
  // path at once if `sockmap_at_start`, else when it outgrows SockmapPromotion; if the kernel
  // refuses the sockets it stays on splice (see fallback()).
  static absl::StatusOr<std::unique_ptr<TcpSession>> Create(
      event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
      const Options& options, TcpSessionCallbacks& callbacks, SockmapContext* sockmap = nullptr,
      bool sockmap_at_start = false);
  ~TcpSession() override;

  // Resets both sides now and reports kAborted from within this call. No-op once closed.
  void Abort();
  // A flow-control signal from the worker's ring for source socket `cookie`.
  void OnSockmapSignal(uint64_t cookie);

  bool closed() const { return closed_; }
  uint64_t bytes_to_backend() const { return Bytes(upstream_, up_relay_.get()); }
  uint64_t bytes_to_client() const { return Bytes(downstream_, down_relay_.get()); }
  // Of those, the bytes the kernel redirected (the rest went through the pumps).
  uint64_t kernel_bytes_to_backend() const { return up_relay_ ? up_relay_->bytes() : 0; }
  uint64_t kernel_bytes_to_client() const { return down_relay_ ? down_relay_->bytes() : 0; }
  uint64_t kernel_bytes_repeated() const {
    return (up_relay_ ? up_relay_->repeated() : 0) + (down_relay_ ? down_relay_->repeated() : 0);
  }
  // kSockmap once a direction was handed to the kernel (even if some bytes went through the
  // pumps).
  Path path() const;
  // The pump's I/O for one direction (what moved the bytes the kernel did not).
  SplicePump::Path pump_path(bool upstream) const {
    return (upstream ? upstream_ : downstream_).path();
  }
  // Why a session that tried to enrol stayed on splice.
  std::optional<fastpath::Fallback> fallback() const { return fallback_; }
  // A kernel direction's state ("attached", "paused", "forwarding", "resuming", "draining",
  // "pending"), "user:splice"/"user:copy" once its pump has it for good, or "splice"/"copy"
  // for a connection that was never enrolled.
  std::string DirectionState(bool upstream) const;

 private:
  TcpSession(event::EventLoop& loop, PipePool& pool, base::UniqueFd client, base::UniqueFd backend,
             const Options& options, TcpSessionCallbacks& callbacks, SockmapContext* sockmap);
  absl::Status Start(bool sockmap_at_start);
  static uint64_t Bytes(const SplicePump& pump, const SockmapRelay* relay) {
    return pump.bytes() + (relay != nullptr ? relay->bytes() : 0);
  }
  // Enrols once the connection is due (SockmapPromotion).
  void MaybePromote();
  void Enrol();
  // Hands each enrolled direction whose pump holds no byte to the kernel.
  void AttachReady();
  uint32_t SocketEvents(bool client) const;
  void UpdateSocketEvents();
  void OnClientEvents(uint32_t events);
  void OnBackendEvents(uint32_t events);
  // Returns false if the session closed.
  bool CheckSocketError(uint32_t events, int fd, CloseReason reason);
  // Acts on what a relay asked for; returns false if the session closed.
  bool Follow(SockmapRelay::Next next, SplicePump& pump, CloseReason failed);
  void OnPollTimer();
  // Lets relays whose pump forwarded passed bytes and is idle resume the kernel; returns false
  // if the session closed.
  bool ForwardersIdle();
  void RunPumps();
  // Returns false if the session closed.
  bool Step(SplicePump& pump, const SockmapRelay* relay, bool& done, int dst_fd,
            CloseReason src_failed, CloseReason dst_failed, bool& yielded);
  void OnIdleTimer();
  void Close(CloseReason reason);

  event::EventLoop& loop_;
  TcpSessionCallbacks& callbacks_;
  const absl::Duration idle_timeout_;
  SockmapContext* const sockmap_;
  // Declared before the pumps and events, so they close last: FileEvents must unregister first.
  base::UniqueFd client_;
  base::UniqueFd backend_;
  SplicePump upstream_;    // client -> backend
  SplicePump downstream_;  // backend -> client
  // After the sockets: the map entries go before the sockets close. The relays go first.
  std::unique_ptr<fastpath::SockmapLink> link_;
  std::unique_ptr<SockmapRelay> up_relay_;    // client -> backend through the kernel
  std::unique_ptr<SockmapRelay> down_relay_;  // backend -> client through the kernel
  std::optional<fastpath::Fallback> fallback_;
  std::unique_ptr<event::FileEvent> client_event_;
  std::unique_ptr<event::FileEvent> backend_event_;
  std::unique_ptr<event::Timer> idle_timer_;
  std::unique_ptr<event::Timer> poll_timer_;  // only while a relay is paused or draining
  std::unique_ptr<event::Timer> promote_timer_;
  bool promote_due_ = false;
  bool kernel_used_ = false;  // a direction was attached: the path is sockmap
  absl::Duration poll_interval_;
  absl::Duration last_activity_;
  bool upstream_done_ = false;
  bool downstream_done_ = false;
  bool closed_ = false;
};

// "sockmap", "splice" or "copy": the path label of the per-path metrics.
const char* PathName(TcpSession::Path path);

}  // namespace sluice::proxy
