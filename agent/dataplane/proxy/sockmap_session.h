// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "lib/event/event_loop.h"

#include "agent/dataplane/fastpath/sockmap_fast_path.h"
#include "agent/dataplane/fastpath/sockmap_link.h"
#include "agent/dataplane/proxy/sockmap_relay.h"
#include "agent/dataplane/proxy/splice_pump.h"

namespace sluice::proxy {

class SockmapSession;

// Which connections go through the kernel: the quiet, long-lived ones. Measured on 2 vCPUs
// (issue 12, docs/performance.md), the kernel path wins on request/response traffic (64 B
// ping-pong p50 ~30 against ~70 us on splice) and loses on bulk: a redirect to egress goes through
// the destination's psock kworker, which serialises a connection, and splice with 1 MiB pipes
// moved 1 and 4 bulk streams faster than sockmap on loopback and through veths. Short
// connections lose too: enrolment and removal cost about twenty syscalls each (~4.5k against
// ~6.7k conn/s). So every connection starts on splice; once it has been open for `age`, and
// then every `recheck`, it is promoted if it moved less than `max_rate` over that window. A
// direction then attaches only when its pump holds no byte and its last read emptied the
// socket: the verdict takes whole skbs from the receive queue (tcp_read_skb ignores how much of
// the head skb was read), so attaching after a partial read would send that skb's head twice. A
// pump that never catches up keeps its direction. A promoted connection that turns bulk later
// stays in the kernel (it still works, only slower).
struct SockmapPromotion {
  absl::Duration age = absl::Milliseconds(50);
  absl::Duration recheck = absl::Seconds(1);
  // 512 Mbit/s: 64 B ping-pong moves ~1 MB/s, a bulk stream several hundred MB/s.
  uint64_t max_rate = uint64_t{64} << 20;  // bytes per second, both directions

  // Whether a connection that moved `bytes` in the last `window` is quiet enough.
  bool Quiet(uint64_t bytes, absl::Duration window) const {
    return static_cast<double>(bytes) <
           static_cast<double>(max_rate) * absl::ToDoubleSeconds(window);
  }
};

// A worker's share of the fast path, handed to each of its sessions.
// Thread: owning worker loop.
struct SockmapContext {
  fastpath::SockmapFastPath& fast_path;
  uint32_t ring;  // this worker's ring index
  SockmapFlow flow;
  SockmapPromotion promotion;
  // Ring signals name a source socket: its connection, registered while enrolled.
  absl::flat_hash_map<uint64_t, SockmapSession*> sessions;
  // Routes a ring signal to its connection (none: the connection has closed since).
  void Dispatch(uint64_t cookie);
};

// What a SockmapSession asks of the TcpSession that owns it. Held by reference; must outlive
// the SockmapSession.
class SockmapSessionCallbacks {
 public:
  virtual ~SockmapSessionCallbacks() = default;
  // A direction passed between the kernel and its pump: the sockets' epoll masks change.
  virtual void OnDirectionsChanged() = 0;
  // A ring signal or the poll timer may have given the pumps work: run them.
  virtual void OnPumpsDue() = 0;
  // Measuring `src`'s direction failed (a socket vanished): reset the connection.
  virtual void OnSockmapFailed(fastpath::Side src) = 0;
};

// The fast-path half of one TcpSession: enrols the connection once it is due
// (SockmapPromotion), then owns its SockmapLink and a SockmapRelay per direction, acts on what
// the relays ask for (pump readiness, polling, a reset) and receives the connection's ring
// signals. It exists so that TcpSession only asks, per direction, whether the kernel or the
// pump moves the bytes (kernel()). Thread: owning worker loop.
class SockmapSession final {
 public:
  // The fds and the pumps (indexed by source side) are the TcpSession's and outlive this.
  SockmapSession(event::EventLoop& loop, SockmapContext& context, int client_fd, int backend_fd,
                 SplicePump& upstream, SplicePump& downstream, SockmapSessionCallbacks& callbacks);
  ~SockmapSession();  // leaves the maps: the sockets must still be open
  SockmapSession(const SockmapSession&) = delete;
  SockmapSession& operator=(const SockmapSession&) = delete;

  // Enrols now if `at_start` (before the pumps read anything: both directions attach at once;
  // the startup probe and tests), else once the connection is quiet (SockmapPromotion).
  void Start(bool at_start);
  // After the pumps ran: hands each pending direction whose pump holds no byte to the kernel,
  // and lets relays whose pump forwarded passed bytes resume. Returns false if the session
  // closed.
  bool AfterPumps();
  // `src` sent its FIN (or hung up). Returns false if the session closed.
  bool OnSrcEof(fastpath::Side src);
  // A flow-control signal from the worker's ring for source socket `cookie`.
  void OnSignal(uint64_t cookie);
  // Measures the kernel directions; true if they moved bytes since the last call.
  bool Progressed();
  // The session closed: stops the timers and takes the final kernel byte counts.
  void Close();

  // Whether the kernel has `src`'s direction (its pump must not run).
  bool kernel(fastpath::Side src) const {
    return relays_[Index(src)] != nullptr && relays_[Index(src)]->kernel();
  }
  // Bytes the kernel redirected out of `src`.
  uint64_t kernel_bytes(fastpath::Side src) const {
    return relays_[Index(src)] != nullptr ? relays_[Index(src)]->bytes() : 0;
  }
  uint64_t repeated() const;
  // Whether a direction was ever handed to the kernel.
  bool used() const { return used_; }
  // Why enrolment failed.
  std::optional<fastpath::Fallback> fallback() const { return fallback_; }
  // See TcpSession::DirectionState; `pump_path` is the pump's "splice" or "copy".
  std::string DirectionState(fastpath::Side src, const char* pump_path) const;

 private:
  static int Index(fastpath::Side s) { return static_cast<int>(s); }
  SplicePump& pump(fastpath::Side s) { return *pumps_[Index(s)]; }
  // The promotion timer: enrols a quiet connection, else looks again after `recheck`.
  void OnPromoteTimer();
  uint64_t PumpBytes() {
    return pump(fastpath::Side::kClient).bytes() + pump(fastpath::Side::kBackend).bytes();
  }
  void Enrol();
  // Hands each pending direction whose pump holds no byte to the kernel.
  void AttachReady();
  // Acts on what `src`'s relay asked for; returns false if the session closed.
  bool Follow(SockmapRelay::Next next, fastpath::Side src);
  void OnPollTimer();
  // Lets relays whose pump forwarded passed bytes and is idle resume the kernel; returns false
  // if the session closed.
  bool ForwardersIdle();

  event::EventLoop& loop_;
  SockmapContext& context_;
  SockmapSessionCallbacks& callbacks_;
  const int client_fd_;
  const int backend_fd_;
  const std::array<SplicePump*, 2> pumps_;
  std::unique_ptr<fastpath::SockmapLink> link_;
  std::array<std::unique_ptr<SockmapRelay>, 2> relays_;  // after link_: they go first
  std::optional<fastpath::Fallback> fallback_;
  std::unique_ptr<event::Timer> promote_timer_;
  std::unique_ptr<event::Timer> poll_timer_;  // only while a relay is paused or draining
  absl::Duration poll_interval_;
  // The current promotion window: when it began and PumpBytes() then.
  base::MonoTime window_start_;
  uint64_t window_bytes_ = 0;
  bool used_ = false;
  bool closed_ = false;
};

}  // namespace sluice::proxy
