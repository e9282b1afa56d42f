// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace sluice::fastpath {

// The two sockets of a proxied connection. A direction is named by its source side.
enum class Side { kClient = 0, kBackend = 1 };
inline Side Other(Side s) { return s == Side::kClient ? Side::kBackend : Side::kClient; }

// Where one direction's bytes are, all counted since enrolment.
struct Progress {
  uint64_t consumed = 0;    // redirected out of the source by the program
  uint64_t passed = 0;      // left by the program on the source for the caller to recv()
  uint64_t repeated = 0;    // handed to the program a second time by the kernel, cut off
  uint64_t written = 0;     // of the redirected, those in the destination's send queue
  uint64_t dst_queued = 0;  // bytes in the destination's send queue, unacked (SIOCOUTQ)
  // Bytes the kernel holds between the two sockets (in the destination's psock queue),
  // beyond what TCP buffers bound.
  uint64_t in_flight() const { return consumed > written ? consumed - written : 0; }
};

// What moving one enrolled connection's directions through the kernel asks of the kernel: the
// system seam between proxy::SockmapRelay's state machine and the BPF maps. SockmapLink is the
// real one; FakeKernelLink (fake_kernel_link.h) scripts it for unprivileged unit tests. The
// contracts are SockmapLink's. Thread: owning worker loop.
class KernelLink {
 public:
  virtual ~KernelLink() = default;

  // Hands `src` to the verdict. Fails (errno EOPNOTSUPP) once `src` left ESTABLISHED.
  virtual absl::Status Attach(Side src) = 0;
  // `user_written`: bytes the caller itself wrote to the destination since enrolment.
  virtual absl::StatusOr<Progress> Measure(Side src, uint64_t user_written) const = 0;
  // Signals the worker's ring once `src` has redirected `notify_at` bytes.
  virtual absl::Status SetMark(Side src, uint64_t notify_at) = 0;
  // Leaves `src`'s bytes on it for the caller to recv(); redirects in progress have finished
  // and are counted when it returns.
  virtual absl::Status Pass(Side src) = 0;
  // Redirects again once `passed` equals `forwarded`, with the mark at `notify_at`.
  virtual absl::Status Resume(Side src, uint64_t forwarded, uint64_t notify_at) = 0;
  // Runs the verdict over bytes waiting in `src`'s receive queue.
  virtual absl::Status Kick(Side src) = 0;
};

}  // namespace sluice::fastpath
