// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

#include "agent/base/metrics.h"
#include "agent/fastpath/sockmap_fast_path.h"
#include "agent/fastpath/sockmap_link.h"
#include "agent/proxy/splice_pump.h"

namespace sluice::proxy {

class TcpSession;

// Flow control of one kernel-pumped direction, in bytes held in the destination's psock queue
// (Progress::in_flight): above `high` the program stops redirecting and leaves the source's
// bytes on the source socket (pass), charged to it, so TCP's window slows the sender; the agent
// forwards those itself once the psock queue is empty, and redirecting resumes when it has
// caught up and the destination's send queue holds at most `low` unsent bytes. The kernel queue
// is otherwise unbounded (a fast client and a slow backend grew it by ~1 GiB). `high` also sets
// how often a busy direction signals its worker: once per `high` bytes redirected.
struct SockmapWatermarks {
  uint64_t high = uint64_t{2} << 20;
  uint64_t low = uint64_t{512} << 10;
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
  // Routes a ring signal to its session (none: the connection has closed since).
  void Dispatch(uint64_t cookie);
};

// One direction of an enrolled connection, between its SplicePump and the kernel. States:
//   kPending:    not attached yet; the pump moves the direction until Attach() (called when the
//                pump holds no byte and has read the socket empty) hands it to the kernel.
//   kAttached:   the verdict redirects every byte; the worker hears from it only when the mark
//                is reached (OnSignal) or the source ends (OnSrcEof).
//   kPaused:     above the high watermark the verdict passes instead; Poll() waits for the
//                psock queue to empty (bytes the agent wrote now would overtake it).
//   kForwarding: the pump (copy I/O: passed bytes are invisible to splice) forwards the passed
//                bytes; OnPumpIdle() asks the program to redirect again once it has caught up.
//   kResuming:   Poll() checks that the program did (a byte passed meanwhile means forwarding
//                more first).
//   kDraining:   the source ended; Poll() waits for the psock queue to empty.
//   kUser:       the pump's for good: what is left on the source (passed bytes, the EOF).
// Nothing here removes a socket from a map: deleting an attached socket while its receive path
// runs drops or reorders bytes (tests/bpf/sockmap_kernel_test.cc), so pausing is pass/resume.
// Thread: owning worker loop.
class SockmapRelay final {
 public:
  enum class State { kPending, kAttached, kPaused, kForwarding, kResuming, kDraining, kUser };
  // What the session must do after a call.
  enum class Next {
    kNothing,
    kPoll,      // call Poll() again soon
    kRunPump,   // the pump moves the direction now (kForwarding, kUser): give it readiness
    kStopPump,  // the kernel has it again (kAttached): stop watching for the pump
    kFailed,    // a measurement failed (a socket vanished): reset the connection
  };

  // `pump` is the direction's pump (not owned); bytes it wrote before now are not forwarded.
  SockmapRelay(fastpath::SockmapLink& link, fastpath::Side src, SplicePump& pump,
               SockmapContext& context);
  ~SockmapRelay();
  SockmapRelay(const SockmapRelay&) = delete;
  SockmapRelay& operator=(const SockmapRelay&) = delete;

  // kPending -> kAttached (or kUser if the kernel refuses). Call only while the pump holds no
  // byte and its last read emptied the socket. Returns whether the kernel now has it.
  bool Attach();
  Next OnSignal();
  Next OnSrcEof();
  Next Poll();
  // After the pump ran in kForwarding: call when it holds nothing and read the socket empty.
  Next OnPumpIdle();

  State state() const { return state_; }
  // Whether the pump must not run (the kernel owns the direction's bytes).
  bool kernel() const {
    return state_ == State::kAttached || state_ == State::kPaused || state_ == State::kResuming ||
           state_ == State::kDraining;
  }
  // Bytes redirected by the kernel, as of the last measurement.
  uint64_t bytes() const { return last_.consumed; }
  // Bytes the kernel repeated and the program cut off, as of the last measurement.
  uint64_t repeated() const { return last_.repeated; }
  // Kernel bytes written into the destination, as of the last measurement.
  uint64_t written() const { return last_.written; }
  // Measures; true if bytes moved since the previous call (for the idle timer).
  bool Progressed();

 private:
  uint64_t Forwarded() const { return pump_.bytes() - pump_base_; }
  bool Measure();
  Next Pause();
  Next StartForwarding();
  void SetPaused(bool paused);

  fastpath::SockmapLink& link_;
  const fastpath::Side src_;
  SplicePump& pump_;
  SockmapContext& context_;
  const uint64_t pump_base_;     // pump bytes at enrolment (the link's written base)
  uint64_t pump_at_attach_ = 0;  // pump bytes when the kernel took over (passed bytes after)
  State state_ = State::kPending;
  bool counted_paused_ = false;
  fastpath::Progress last_;
  uint64_t idle_mark_ = 0;  // consumed + written at the last Progressed()
};

const char* SockmapStateName(SockmapRelay::State state);

}  // namespace sluice::proxy
