// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/net/address.h"

#include "agent/dataplane/extnat/nat_object.h"
#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"

namespace sluice::extnat {

// What one service port is to remote clients, for one address family.
struct Service {
  std::vector<socklb::Frontend> frontends;   // NodePorts on node addresses, external/LB IPs
  std::vector<net::SocketAddress> backends;  // of the frontends' family; all on this node
  // Per frontend address: the sources that may reach it (loadBalancerSourceRanges of a
  // LoadBalancer IP); a frontend not listed takes every source.
  std::map<net::IpAddress, std::vector<net::Cidr>> source_ranges;
  absl::Duration affinity = absl::ZeroDuration();  // ClientIP timeout; zero: none
  bool random = false;
  friend bool operator==(const Service&, const Service&) = default;
};

// A change to one service port, by name; nullopt removes it.
using Change = std::pair<std::string, std::optional<Service>>;

// eBPF NAT for remote clients: the tc programs (NatObject), their service maps programmed with
// the socket-LB rules (socklb::ServiceMaps), the source-range trie, and the conntrack table's
// ageing. Thread: control plane; Counters(), Drops(), Frontends() and flows() are thread-safe.
class ExtNat final {
 public:
  struct Maps {  // the seam: the kernel's, or FakeBpfMaps in unit tests
    socklb::ServiceMaps::Maps services;
    fastpath::BpfMap& ranges;   // sluice_nat_range -> u8
    fastpath::BpfMap& flows;    // sluice_nat_tuple -> sluice_nat_ct
    fastpath::BpfMap& traffic;  // u32 id -> sluice_nat_traffic per CPU
    fastpath::BpfMap& drops;    // u32 reason -> u64 per CPU
  };

  static absl::StatusOr<std::unique_ptr<ExtNat>> Create(const LoadOptions& options);
  // No programs: programs `maps`, which must outlive it (unit tests over FakeBpfMap).
  static std::unique_ptr<ExtNat> ForMaps(Maps maps, const LoadOptions& options);
  ~ExtNat();

  // The devices remote clients arrive on: attaches to new ones, detaches from the others.
  absl::Status SetDevices(const std::vector<std::string>& devices);
  std::vector<std::string> Devices() const;

  // As socklb::SocketLb's: `changes` only; `all` is every service (the first time, what an
  // earlier agent left is removed too).
  absl::Status Apply(const std::vector<Change>& changes);
  absl::Status ApplyAll(const std::map<std::string, Service>& all);

  // Removes conntrack entries idle past their age (both entries of a flow go together);
  // `now` is bpf_ktime_get_ns()'s clock (CLOCK_MONOTONIC). Returns the entries left.
  absl::StatusOr<uint64_t> CollectFlows(absl::Duration now);

  struct Counts {
    uint64_t flows = 0;        // created
    uint64_t range_drops = 0;  // packets dropped by source ranges
    uint64_t packets = 0;      // translated, both directions
    uint64_t bytes = 0;
  };
  std::map<std::string, Counts> Counters() const;
  // By reason label ("source_range", "conntrack_full", "fragment", "malformed").
  std::map<std::string, uint64_t> Drops() const;
  std::map<std::string, std::vector<std::string>> Frontends() const;
  uint64_t flows() const;  // conntrack entries after the last CollectFlows
  bool adopted() const;

  // Detaches from every device and removes our pinned maps under `bpf_root`.
  static absl::Status Cleanup(const std::string& bpf_root) {
    return NatObject::RemoveAll(bpf_root);
  }
};

// The startup self-test of --external-datapath=auto: loads the object without pinning in a
// scratch network namespace, translates one TCP and one UDP packet between two veths there and
// reports what failed (the kernel, the hooks, the verifier, capabilities).
absl::Status SelfTest();

}  // namespace sluice::extnat
