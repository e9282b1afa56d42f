// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <linux/types.h>

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/fastpath/skeleton.h"
#include "agent/dataplane/socklb/service_maps.h"

namespace sluice::socklb {

// Closes connected UDP sockets translated to a backend that left its service: they never
// connect again by themselves. Owns the socket iterator (sluice_udp_reap, bpf_sock_destroy,
// kernel >= 6.5) that closes the sockets whose pair is in sluice_lb_gone. Thread: control plane;
// reaped() is thread-safe.
class UdpReaper final {
 public:
  // (frontend, backend) pairs taken in one walk of the node's sockets: sluice_lb_gone's size.
  static constexpr uint32_t kBatch = 4096;

  // `gone`: sluice_lb_gone; `reaped`: the program's counter. Both must outlive this.
  UdpReaper(fastpath::LinkPtr iterator, fastpath::BpfMap& gone, const __u64& reaped);

  // Closes the sockets translated to one of `gone`, in every network namespace of the node's
  // processes, in batches of kBatch (a larger change, a Service with many UDP ports losing many
  // endpoints, is walked in turns rather than crowding out the other services' pairs).
  absl::Status Reap(const std::vector<Gone>& gone);
  // Sockets closed so far. Thread-safe.
  uint64_t reaped() const;

 private:
  absl::Status ReapBatch(std::span<const Gone> gone);

  fastpath::LinkPtr iterator_;
  fastpath::BpfMap& gone_;
  const __u64& reaped_;  // the skeleton's bss
};

}  // namespace sluice::socklb
