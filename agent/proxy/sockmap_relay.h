// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

#include "agent/base/metrics.h"
#include "agent/fastpath/sockmap_fast_path.h"
#include "agent/fastpath/sockmap_link.h"

namespace sluice::proxy {

class TcpSession;

// Flow control of one kernel-pumped direction, in bytes held in the destination's psock queue
// (Progress::in_flight): above `high` the source is detached, so its bytes stay in its receive
// queue and TCP's window slows the sender; at or below `low` it is attached again. The kernel
// queue is otherwise unbounded (a fast client and a slow backend grew it by ~1 GiB). `high`
// also sets how often a busy direction signals its worker: once per `high` bytes redirected.
struct SockmapWatermarks {
  uint64_t high = uint64_t{8} << 20;
  uint64_t low = uint64_t{4} << 20;
};

// Which connections go through the kernel. Enrolment costs about twenty bpf(2) and setsockopt
// calls per connection, and removal as many, so measured on loopback (2 vCPUs, 16 clients
// fetching 1 KiB over HTTP/1.0) short connections ran at ~4.5k conn/s on sockmap against
// ~6.7k on splice, while bulk streams and long request/response connections gained (4-stream
// bulk 11.8 vs 5.6 Gbit/s, 64 B ping-pong p50 30 vs 56 us). The rule:
//   - a listener whose connections average `bytes` or more (ConnectionSizes; unknown counts as
//     big) enrols each new connection at once, before any byte is read;
//   - other connections start on splice and are promoted once they have moved `bytes` or been
//     open for `age`. A direction then attaches only when its pump holds no byte and its last
//     read emptied the socket: the verdict takes whole skbs from the receive queue
//     (tcp_read_skb ignores how much of the head skb was read), so attaching after a partial
//     read would send that skb's head twice. A pump that never catches up keeps its direction.
// docs/architecture.md, "Sockmap fast path", has the numbers.
struct SockmapPromotion {
  uint64_t bytes = uint64_t{64} << 10;
  absl::Duration age = absl::Milliseconds(50);
};

// A worker's share of the fast path, handed to each of its sessions.
// Thread: owning worker loop.
struct SockmapContext {
  fastpath::SockmapFastPath& fast_path;
  uint32_t ring;  // this worker's ring index
  SockmapWatermarks marks;
  SockmapPromotion promotion;
  base::Gauge& paused;    // directions paused now, all workers
  base::Counter& pauses;  // pauses so far
  // Ring signals name a source socket: its session, registered while enrolled.
  absl::flat_hash_map<uint64_t, TcpSession*> sessions;
};

// One direction of an enrolled connection while the kernel pumps it, up to the moment its
// SplicePump takes over. States:
//   kPending:  enrolled, not attached yet: the pump still moves this direction until its pipe
//              is empty, then Attach() hands it to the kernel.
//   kAttached: the verdict program redirects every byte; the worker hears from it only when
//              the direction's mark is reached (OnSignal) or the source ends (OnSrcEof).
//   kPaused:   detached above the high watermark; Poll() attaches it again below the low one.
//   kDraining: detached for good (source EOF, or it left ESTABLISHED while paused); Poll()
//              waits until every redirected byte reached the destination's send queue.
//   kUser:     the pump's for good: after a hand-off it moves what is left in the source's
//              receive queue (often nothing but the EOF) and forwards the FIN; or the kernel
//              refused to attach the source (it was no longer ESTABLISHED).
// Removing a socket from the maps while bytes are in flight would drop them, so nothing here
// removes anything; the state only ever moves towards kUser, and only with nothing in flight.
// Thread: owning worker loop.
class SockmapRelay final {
 public:
  enum class State { kPending, kAttached, kPaused, kDraining, kUser };
  // What the session must do after a call.
  enum class Next {
    kNothing,
    kPoll,     // call Poll() again soon
    kHandOff,  // the direction is the pump's from now on
    kFailed,   // a measurement failed (a socket vanished): reset the connection
  };

  // Starts kPending.
  SockmapRelay(fastpath::SockmapLink& link, fastpath::Side src, SockmapContext& context);
  ~SockmapRelay();
  SockmapRelay(const SockmapRelay&) = delete;
  SockmapRelay& operator=(const SockmapRelay&) = delete;

  // kPending -> kAttached (or kUser if the kernel refuses). Call only while the pump holds no
  // byte of this direction. Returns whether the kernel now pumps it.
  bool Attach();
  Next OnSignal();
  Next OnSrcEof();
  Next Poll();

  State state() const { return state_; }
  // Whether the kernel owns the direction (the pump must not run).
  bool kernel() const { return state_ != State::kUser && state_ != State::kPending; }
  // Bytes redirected by the kernel, as of the last measurement.
  uint64_t bytes() const { return last_.consumed; }
  // Bytes written into the destination, as of the last measurement.
  uint64_t written() const { return last_.written; }
  // Measures; true if bytes moved since the previous call (for the idle timer).
  bool Progressed();

 private:
  Next Drain();
  void SetPaused(bool paused);

  fastpath::SockmapLink& link_;
  const fastpath::Side src_;
  SockmapContext& context_;
  State state_;
  fastpath::Progress last_;
  uint64_t idle_mark_ = 0;  // consumed + written at the last Progressed()
};

const char* SockmapStateName(SockmapRelay::State state);

}  // namespace sluice::proxy
