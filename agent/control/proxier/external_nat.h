// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "lib/net/address.h"

#include "agent/control/proxier/proxier.h"
#include "agent/dataplane/extnat/ext_nat.h"

namespace sluice::proxier {

// What ExternalNatChanges needs besides the port: this node.
struct ExternalNatContext {
  std::string node_name;                 // EndpointInfo.node_name of local endpoints
  std::vector<net::IpAddress> node_ips;  // NodePorts are translated on these
  bool random = false;                   // --external-algorithm=random
};

// Appends the changes that program `port` as `info` (null: removed) for remote clients: one
// per family ("<port>#4", "<port>#6"), nullopt where that family is not served in the kernel.
// Frontends are external and LoadBalancer IPs at the service port and NodePorts on the node's
// addresses; backends the external endpoints of the frontend's family, those on other nodes
// (eTP Cluster) listed as remote, to be SNATed. A port without endpoints (of that family) and
// SCTP are left to the proxy, which listens on the same addresses. Pure: the unit tests' seam.
void ExternalNatChanges(const ServicePortName& port, const ServicePortInfo* info,
                        const ExternalNatContext& context, std::vector<extnat::Change>& out);

// One link of the node as NodeDevices reads it (loopback is not listed).
struct NodeLink {
  std::string name;
  std::string driver;  // as ethtool reports it ("veth", "bridge", "virtio_net"); "" unknown
  std::vector<net::IpAddress> addresses;
};

// The devices remote clients arrive on by default: those holding a node address in `cidrs`
// (every address when empty) other than IPv6 link-local ones and `exclude` (our VIPs), except
// veths and bridges: as Cilium's device detection, pod-facing links (cni0, docker0, a pod's
// veth with an address) carry no remote client, and translating there would also catch pod
// traffic. --external-devices selects any device. Pure: the unit tests' seam. Sorted.
std::vector<std::string> SelectNodeDevices(const std::vector<NodeLink>& links,
                                           const std::vector<net::Cidr>& cidrs,
                                           const absl::flat_hash_set<net::IpAddress>& exclude);
// SelectNodeDevices over this network namespace's links (getifaddrs, ETHTOOL_GDRVINFO).
std::vector<std::string> NodeDevices(const std::vector<net::Cidr>& cidrs,
                                     const absl::flat_hash_set<net::IpAddress>& exclude);

// The SNAT address of each of `devices` per family: its first address (the primary one, as
// masquerading picks) that is global, not loopback, not IPv6 link-local and not in `exclude`
// (our VIPs). Over this network namespace's addresses (getifaddrs).
std::vector<extnat::SnatDevice> SnatDevices(const std::vector<std::string>& devices,
                                            const absl::flat_hash_set<net::IpAddress>& exclude);

// eBPF NAT for remote clients as a TableConsumer: each changed service port becomes its
// per-family extnat::Services (ExternalNatChanges). Full syncs re-read the node's addresses and
// devices and set the devices the programs are attached to. Thread: control plane (added
// Proxier::Order::kBeside: a full Apply may run on a thread of its own, never beside another
// of this consumer's calls); Invalidate() is thread-safe.
class ExternalNat final : public TableConsumer {
 public:
  struct Options {
    // The node addresses NodePorts are reached on; read at each full sync.
    std::function<std::vector<net::IpAddress>()> node_ips;
    // The devices remote clients arrive on; read at each full sync.
    std::function<std::vector<std::string>()> devices;
    // Their SNAT addresses (SnatDevices below); read at each full sync with the devices.
    std::function<std::vector<extnat::SnatDevice>(const std::vector<std::string>&)> snat_addresses;
    bool random = false;    // --external-algorithm=random
    std::string node_name;  // local endpoints; also seeds each service's backend order
  };

  ExternalNat(extnat::ExtNat& nat, Options options);

  // TableConsumer
  absl::Status Apply(const TableDelta& delta) override;

  // Makes the next Apply full (node addresses or links changed: see vip::LinkWatcher).
  void Invalidate() { invalid_ = true; }

  // Frontends served in the kernel by service port name ("ns/name:port"), for
  // /debug/services and /proxyMode.
  std::map<std::string, std::vector<std::string>> Frontends() const;
  // Calls `fn` for every service port the kernel translates, in name order, with its counters:
  // one read of each counter map (extnat::ExtNat::ForEachCounter). Thread-safe.
  void ForEachCounter(
      absl::FunctionRef<void(std::string_view port, const extnat::ExtNat::Counts&)> fn) const;
  // ForEachCounter's, by service port name. Thread-safe.
  std::map<std::string, extnat::ExtNat::Counts> Counters() const;

 private:
  extnat::ExtNat& nat_;
  const Options options_;
  ExternalNatContext context_;  // node_ips re-read at each full sync
  std::atomic<bool> invalid_{false};
  std::optional<std::vector<std::string>> devices_;  // last set, for the log
};

}  // namespace sluice::proxier
