// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "lib/base/metrics.h"

#include "agent/dataplane/fastpath/kernel_link.h"
#include "agent/dataplane/proxy/splice_pump.h"

namespace sluice::proxy {

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

// What a worker's relays share: the watermarks and the pause metrics.
// Thread: owning worker loop (the metrics are atomics read by the admin server).
struct SockmapFlow {
  SockmapWatermarks marks;
  base::Gauge& paused;    // directions paused now, all workers
  base::Counter& pauses;  // pauses so far
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
  SockmapRelay(fastpath::KernelLink& link, fastpath::Side src, SplicePump& pump, SockmapFlow& flow);
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

  fastpath::KernelLink& link_;
  const fastpath::Side src_;
  SplicePump& pump_;
  SockmapFlow& flow_;
  const uint64_t pump_base_;     // pump bytes at enrolment (the link's written base)
  uint64_t pump_at_attach_ = 0;  // pump bytes when the kernel took over (passed bytes after)
  State state_ = State::kPending;
  bool counted_paused_ = false;
  fastpath::Progress last_;
  uint64_t idle_mark_ = 0;  // consumed + written at the last Progressed()
};

const char* SockmapStateName(SockmapRelay::State state);

}  // namespace sluice::proxy
