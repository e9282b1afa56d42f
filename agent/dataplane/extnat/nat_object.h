// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "agent/dataplane/fastpath/skeleton.h"

struct ext_nat_bpf;

namespace sluice::extnat {

// Age of a TCP flow after an RST or a FIN from both sides, Cilium's (its regular TCP FIN
// timeout, --bpf-ct-timeout-regular-tcp-fin) and the kernel conntrack's after an RST
// (nf_conntrack_tcp_timeout_close); the kernel keeps 2 min after two FINs (TIME_WAIT), but the
// endpoints' own stacks hold TIME_WAIT already. Long enough for the last ACK and a retransmitted
// FIN to be translated; short, so that closed flows free the table.
inline constexpr absl::Duration kTcpClosedAge = absl::Seconds(10);

inline constexpr uint32_t kSnatPortMin = 61000;
inline constexpr uint32_t kSnatPortMax = 65535;

struct LoadOptions {
  std::string bpf_root;  // pin directory on a bpffs ("" = no pinning: maps die with the agent)
  // Map sizes (max_entries, fixed at load; docs/configuration.md states each one's cost).
  uint32_t max_frontends = 65536;  // frontends of all services; also counters
  uint32_t max_slots = 262144;     // backends of all services, twice while a set is swapped
  uint32_t max_affinity = 16384;   // (client, service) affinity entries (LRU)
  uint32_t max_flows = 262144;     // conntrack entries (two per flow), preallocated
  // Conntrack ages (sluice_nat_age_of in bpf_abi.h says which applies; kube-proxy's
  // conntrack.tcpEstablishedTimeout, tcpCloseWaitTimeout and udpTimeout where set, the
  // kernel's defaults otherwise), fixed at load.
  absl::Duration tcp_established = absl::Hours(24);
  absl::Duration tcp_close_wait = absl::Hours(1);
  absl::Duration tcp_closed = kTcpClosedAge;
  absl::Duration udp = absl::Seconds(30);
  // Source ports of SNATed flows (eTP Cluster to a backend on another node), per node address
  // and backend: above the kernel's default net.ipv4.ip_local_port_range (32768-60999), so that
  // they do not clash with the node's own connections to the same backend (operations.md).
  uint32_t snat_port_min = kSnatPortMin;
  uint32_t snat_port_max = kSnatPortMax;
  // DNATed packets to a local backend also leave by FIB lookup and redirect (skipping the
  // stack's forwarding and netfilter); false: handed to the stack.
  bool fib_forward = true;
};

// The external-NAT BPF object (bpf/ext_nat.bpf.c) loaded, its tc programs attached (clsact
// ingress and egress) to the devices remote clients arrive on. With a bpf root its maps are
// pinned there and an earlier agent's are reused, so flows survive a restart; the tc filters
// stay attached when this is destroyed (the qdisc holds them) and the next agent replaces them
// in place. Thread: control plane.
class NatObject final {
 public:
  // PermissionDenied without CAP_BPF + CAP_NET_ADMIN (or CAP_SYS_ADMIN).
  static absl::StatusOr<std::unique_ptr<NatObject>> Load(const LoadOptions& options);
  ~NatObject();

  ext_nat_bpf& skel() const { return **skel_; }
  // Whether pinned maps of an earlier agent were reused.
  bool adopted_maps() const { return adopted_maps_; }

  // Attaches (or replaces an earlier agent's) ingress and egress filters on `device`.
  // NotFound when there is no such device; FailedPrecondition when it is not Ethernet (the
  // programs expect an Ethernet header; loopback has one). Idempotent.
  absl::Status Attach(const std::string& device);
  // Removes our filters from `device` (nothing attached is not an error).
  absl::Status Detach(const std::string& device);
  // Devices with our filters attached by this object.
  std::vector<std::string> Devices() const;

  // Removes our filters from every device of this network namespace that has them, then our
  // pinned maps under `bpf_root`. Nothing there is not an error.
  static absl::Status RemoveAll(const std::string& bpf_root);

 private:
  NatObject(const LoadOptions& options, std::unique_ptr<fastpath::Skeleton<ext_nat_bpf>> skel);

  const LoadOptions options_;
  std::unique_ptr<fastpath::Skeleton<ext_nat_bpf>> skel_;
  std::vector<std::string> devices_;
  std::set<int> clsact_;  // ifindexes whose clsact qdisc Attach made sure of
  bool adopted_maps_ = false;
};

}  // namespace sluice::extnat
