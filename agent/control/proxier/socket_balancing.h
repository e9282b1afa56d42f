// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "lib/net/address.h"

#include "agent/control/proxier/proxier.h"
#include "agent/dataplane/socklb/socket_lb.h"

namespace sluice::proxier {

// Socket-level balancing as a TableConsumer: every service port becomes up to four socket-LB
// services, (cluster | external side) x (IPv4 | IPv6). The cluster side's frontends are the
// ClusterIPs with the proxy's cluster endpoints; the external side's are external and
// LoadBalancer IPs and NodePorts on node addresses with its external endpoints, so a local
// client gets what the proxy would give it. A frontend gets backends of its own family only
// (a hook cannot change a socket's family); where a side has endpoints but none of that family
// it is left to the proxy. Thread: control plane.
class SocketBalancing final : public TableConsumer {
 public:
  struct Options {
    // The node addresses NodePorts are reached on; read at each full sync.
    std::function<std::vector<net::IpAddress>()> node_ips;
    bool random = false;    // --socket-lb-algorithm=random
    std::string node_name;  // seeds each service's backend order, as nodes differ
  };

  SocketBalancing(socklb::SocketLb& lb, Options options);

  // TableConsumer
  absl::Status Apply(const TableDelta& delta) override;

  // Programmed frontends by service port name ("ns/name:port/TCP"), for /debug/services.
  std::map<std::string, std::vector<std::string>> Frontends() const;
  // Calls `fn` for every service port balanced at the socket, in name order, with its
  // counters: one read of the kernel's counters (socklb::ServiceMaps::ForEachCounter).
  // Thread-safe.
  void ForEachCounter(
      absl::FunctionRef<void(std::string_view port, const socklb::SocketLb::Counts&)> fn) const;
  // ForEachCounter's, by service port name. Thread-safe.
  std::map<std::string, socklb::SocketLb::Counts> Counters() const;

 private:
  // Appends the changes that program `port` as `info` (null: removed): one per socket-LB name
  // it may have, the names it does not use removed.
  void Build(const ServicePortName& port, const ServicePortInfo* info,
             std::vector<socklb::Change>& out) const;

  socklb::SocketLb& lb_;
  const Options options_;
  std::vector<net::IpAddress> node_ips_;  // read at each full sync
};

}  // namespace sluice::proxier
