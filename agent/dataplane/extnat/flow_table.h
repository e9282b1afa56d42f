// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"

namespace sluice::extnat {

// The ageing of the conntrack table (sluice_nat_ct, bpf/include/sluice/bpf_abi.h). The table is
// a preallocated hash, so nothing leaves it unless the agent removes it: a flow (its forward
// entry, keyed (client, frontend), and its reply entry, keyed (backend, client)) goes once both
// directions have been idle past its age. Thread: control plane; size() is thread-safe.
class FlowTable final {
 public:
  struct Ages {
    // Which applies: sluice_nat_age_of (bpf/include/sluice/bpf_abi.h).
    absl::Duration tcp_established;
    absl::Duration tcp_close_wait;  // a FIN from one side only
    absl::Duration tcp_closed;      // an RST, or a FIN from both sides
    absl::Duration udp;             // and every other protocol
  };
  // The map must outlive this.
  FlowTable(fastpath::BpfMap& map, const Ages& ages);

  // Removes the flows idle past their age at `now` (bpf_ktime_get_ns()'s clock) and returns
  // the entries left.
  absl::StatusOr<uint64_t> Collect(absl::Duration now);
  // Removes the UDP flows translated to a backend that left the frontend: a client that keeps
  // sending would otherwise keep its flow to a backend that is gone (kube-proxy deletes such
  // conntrack entries too). Returns the flows removed.
  absl::StatusOr<uint64_t> Forget(const std::vector<socklb::Gone>& gone);

  // Entries after the last Collect.
  uint64_t size() const { return size_.load(std::memory_order_relaxed); }

 private:
  fastpath::BpfMap& map_;
  const Ages ages_;
  std::atomic<uint64_t> size_{0};
};

}  // namespace sluice::extnat
