// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"

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
  uint64_t high = uint64_t{2} << 20;
  uint64_t low = uint64_t{512} << 10;
};

// A worker's share of the fast path, handed to each of its sessions.
// Thread: owning worker loop.
struct SockmapContext {
  fastpath::SockmapFastPath& fast_path;
  uint32_t ring;  // this worker's ring index
  SockmapWatermarks marks;
  base::Gauge& paused;    // directions paused now, all workers
  base::Counter& pauses;  // pauses so far
  // Ring signals name a source socket: its session, registered while enrolled.
  absl::flat_hash_map<uint64_t, TcpSession*> sessions;
};

// One direction of a connection while the kernel pumps it, up to the moment its SplicePump
// takes over. States:
//   kAttached: the verdict program redirects every byte; the worker hears from it only when
//              the direction's mark is reached (OnSignal) or the source ends (OnSrcEof).
//   kPaused:   detached above the high watermark; Poll() attaches it again below the low one.
//   kDraining: detached for good (source EOF, or it left ESTABLISHED while paused); Poll()
//              waits until every redirected byte reached the destination's send queue.
//   kUser:     handed off: the session's SplicePump moves what is left in the source's
//              receive queue (often nothing but the EOF) and forwards the FIN.
// Removing a socket from the maps while bytes are in flight would drop them, so nothing here
// removes anything; the state only ever moves towards kUser, and only with nothing in flight.
// Thread: owning worker loop.
class SockmapRelay final {
 public:
  enum class State { kAttached, kPaused, kDraining, kUser };
  // What the session must do after a call.
  enum class Next {
    kNothing,
    kPoll,     // call Poll() again soon
    kHandOff,  // the direction is the pump's from now on
    kFailed,   // a measurement failed (a socket vanished): reset the connection
  };

  // `attached`: whether the link attached this direction's source (else it starts as kUser).
  SockmapRelay(fastpath::SockmapLink& link, fastpath::Side src, SockmapContext& context,
               bool attached);
  ~SockmapRelay();
  SockmapRelay(const SockmapRelay&) = delete;
  SockmapRelay& operator=(const SockmapRelay&) = delete;

  Next OnSignal();
  Next OnSrcEof();
  Next Poll();

  State state() const { return state_; }
  bool kernel() const { return state_ != State::kUser; }
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
