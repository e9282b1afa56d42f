// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/net/address.h"

#include "agent/dataplane/extnat/flow_table.h"
#include "agent/dataplane/extnat/nat_object.h"
#include "agent/dataplane/extnat/source_ranges.h"
#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"
#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::extnat {

// What one service port is to remote clients, for one address family.
struct Service {
  std::vector<socklb::Frontend> frontends;   // NodePorts on node addresses, external/LB IPs
  std::vector<net::SocketAddress> backends;  // of the frontends' family
  // The backends' addresses on other nodes: their flows are SNATed to this node's address
  // (eTP Cluster); the others keep the client's address.
  std::vector<net::IpAddress> remote;
  // Per frontend address: the sources that may reach it (loadBalancerSourceRanges of a
  // LoadBalancer IP); a frontend not listed, or with an empty list, takes every source.
  std::map<net::IpAddress, std::vector<net::Cidr>> source_ranges;
  absl::Duration affinity = absl::ZeroDuration();  // ClientIP timeout; zero: none
  bool random = false;
  friend bool operator==(const Service&, const Service&) = default;
};

// A device the programs are attached to and its SNAT addresses (nullopt: none of that family):
// a remote backend's flow leaving there takes its address of the flow's family.
struct SnatDevice {
  std::string device;
  std::optional<net::IpAddress> v4, v6;
  friend bool operator==(const SnatDevice&, const SnatDevice&) = default;
};

// A change to one service port, by name; nullopt removes it.
using Change = std::pair<std::string, std::optional<Service>>;

// eBPF NAT for remote clients: the tc programs (NatObject), their service maps programmed with
// the socket-LB rules (socklb::ServiceMaps), the source-range trie, and the conntrack table's
// ageing. Thread: control plane; ForEachCounter(), Counters(), Drops(), Frontends() and flows()
// are thread-safe.
class ExtNat final {
 public:
  struct Maps {  // the seam: the kernel's, or FakeBpfMaps in unit tests
    socklb::ServiceMaps::Maps services;
    fastpath::BpfMap& ranges;   // sluice_nat_range -> u8
    fastpath::BpfMap& flows;    // sluice_nat_tuple -> sluice_nat_ct
    fastpath::BpfMap& traffic;  // u32 id -> sluice_nat_traffic per CPU
    fastpath::BpfMap& drops;    // u32 reason -> u64 per CPU
    fastpath::BpfMap& remote;   // sluice_nat_host -> u8: backends on other nodes
    fastpath::BpfMap& snat;     // u32 ifindex -> sluice_nat_ifaddr
  };

  static absl::StatusOr<std::unique_ptr<ExtNat>> Create(const LoadOptions& options);
  // No programs: programs `maps`, which must outlive it (unit tests over FakeBpfMap).
  static std::unique_ptr<ExtNat> ForMaps(Maps maps, const LoadOptions& options);
  ~ExtNat();

  // The devices remote clients arrive on: attaches to new ones, detaches from the others. A
  // device that fails is logged and skipped, the others still attached; returns the first error.
  absl::Status SetDevices(const std::vector<std::string>& devices);
  std::vector<std::string> Devices() const;
  // The SNAT addresses of the devices: replaces what was there. A device that is gone is
  // skipped (logged); returns the first error.
  absl::Status SetSnatDevices(const std::vector<SnatDevice>& devices);

  // As socklb::SocketLb's: `changes` only; `all` is every service (the first time, what an
  // earlier agent left is removed too). A guarded frontend's source ranges are written before
  // it is served and removed after it is not; one whose ranges cannot be written is left out
  // (to the proxy) and the error returned. UDP flows to a backend that left are ended.
  absl::Status Apply(const std::vector<Change>& changes);
  absl::Status ApplyAll(std::map<std::string, Service> all);

  // Removes conntrack entries idle past their age (both entries of a flow go together);
  // `now` is bpf_ktime_get_ns()'s clock (CLOCK_MONOTONIC). Returns the entries left.
  absl::StatusOr<uint64_t> CollectFlows(absl::Duration now);

  struct Counts {
    uint64_t flows = 0;        // created
    uint64_t range_drops = 0;  // packets dropped by source ranges
    uint64_t packets = 0;      // translated, both directions
    uint64_t bytes = 0;
  };
  // Calls `fn` for every service port programmed, in name order, with its counters: each
  // counter map read once, no lock held meanwhile (ServiceMaps::ForEachCounter).
  void ForEachCounter(absl::FunctionRef<void(const std::string& name, const Counts&)> fn) const;
  // ForEachCounter's, by service port.
  std::map<std::string, Counts> Counters() const;
  // By reason label ("source_range", "conntrack_full", "fragment", "malformed", "snat_ports",
  // "no_route", "mtu", "mtu_icmp").
  std::map<std::string, uint64_t> Drops() const;
  std::map<std::string, std::vector<std::string>> Frontends() const;
  uint64_t flows() const;  // conntrack entries after the last CollectFlows
  bool adopted() const;
  // The loaded programs and maps (null: ForMaps).
  const NatObject* object() const { return object_.get(); }

  // Detaches from every device and removes our pinned maps under `bpf_root`.
  static absl::Status Cleanup(const std::string& bpf_root) {
    return NatObject::RemoveAll(bpf_root);
  }

 private:
  struct KernelMaps {  // the loaded object's maps, which refer into it
    fastpath::KernelBpfMap svc, slot, member, stats, ranges, flows, traffic, drops, remote, snat;
  };
  // What one Apply hands ServiceMaps, once the source ranges are written.
  struct Plan {
    std::vector<socklb::Change> services;
    std::set<std::string> unguarded;  // guards not written: their guarded frontends left out
    // The remote backends listed for each changed service port (none: left out or removed).
    std::vector<std::pair<std::string, std::vector<net::IpAddress>>> remote;
    absl::Status status;
  };

  ExtNat(Maps maps, const LoadOptions& options);
  Plan Guard(const std::vector<Change>& changes);
  // After ServiceMaps programmed `plan` (`programmed`: without error): removes the guards that
  // `changes` dropped, and resets or removes traffic counters of new or removed service ports.
  void Settle(const std::vector<Change>& changes, const Plan& plan, bool programmed);
  void Forget(const std::vector<socklb::Gone>& gone);
  // Lists `changes`' remote backends in the remote map before they are served; a service port
  // whose backends cannot all be listed is left out of `plan` (to the proxy), with the error.
  void ListRemote(const std::vector<Change>& changes, Plan& plan);
  // After programming: unlists the remote backends no service port has any more.
  void UnlistRemote(const Plan& plan);
  // Removes remote-map entries no service port lists (an earlier agent's).
  void SweepRemote();
  // Removes traffic counters of ids no service port has (an earlier agent's).
  void SweepTraffic();

  std::unique_ptr<NatObject> object_;  // null: ForMaps
  std::unique_ptr<KernelMaps> kernel_maps_;
  const Maps maps_;
  socklb::ServiceMaps services_;
  SourceRanges ranges_;
  FlowTable flows_;
  std::vector<std::string> devices_;  // ForMaps
  // Service ports whose traffic counters this agent reset: their ids.
  std::map<std::string, uint32_t> traffic_ids_;
  bool swept_ = false;
  // Remote backends by service port, and how many service ports list each.
  std::map<std::string, std::vector<net::IpAddress>> remote_;
  std::map<net::IpAddress, int> remote_refs_;
  bool remote_swept_ = false;
  std::map<uint32_t, sluice_nat_ifaddr> snat_;  // as last written, by ifindex
};

// The startup self-test of --external-datapath=auto: loads the object unpinned with small
// maps, programs SelfTestServices() and runs SelfTestPackets. Reports what failed (the kernel,
// the verifier, capabilities, a translation). Needs what the data path needs: CAP_BPF and
// CAP_NET_ADMIN (or CAP_SYS_ADMIN); attaches nothing, makes no device or namespace.
absl::Status SelfTest();
// A TCP and a UDP frontend of each family, with one backend each (TEST-NET addresses).
std::map<std::string, Service> SelfTestServices();
// Runs `object`'s programs on crafted packets (BPF_PROG_TEST_RUN): a client's SYN or datagram
// to each of SelfTestServices()'s frontends must leave ingress to its backend and the backend's
// answer leave egress from the frontend, addresses, ports and checksums right. The error names
// the probe and what was wrong.
absl::Status SelfTestPackets(const NatObject& object);

}  // namespace sluice::extnat
