// SPDX-License-Identifier: Apache-2.0
// ExternalNatChanges, apart from the consumer: it needs no extnat code, only its types.
#include <algorithm>

#include "absl/strings/str_cat.h"

#include "agent/control/proxier/backend_order.h"
#include "agent/control/proxier/external_nat.h"

namespace sluice::proxier {
namespace {

// The extnat service name "<port>#<4|6>": counters sum back by the part before '#'.
std::string Name(const ServicePortName& port, bool v4) {
  return absl::StrCat(port.ToString(), v4 ? "#4" : "#6");
}

bool OnNode(const ServicePortInfo& info, const net::SocketAddress& endpoint,
            const std::string& node) {
  // info.endpoints is sorted by address: a scan per endpoint made a port's build quadratic.
  auto it = std::lower_bound(
      info.endpoints.begin(), info.endpoints.end(), endpoint,
      [](const EndpointInfo& e, const net::SocketAddress& a) { return e.address < a; });
  return it != info.endpoints.end() && it->address == endpoint && !node.empty() &&
         it->node_name == node;
}

// The family's part of `info`, or nullopt where the kernel leaves it to the proxy.
std::optional<extnat::Service> Family(const std::string& name, const ServicePortInfo& info,
                                      const ExternalNatContext& context, bool v4) {
  const bool udp = info.name.protocol == config::Protocol::kUdp;
  extnat::Service svc;
  for (const auto& e : info.external_endpoints) {
    if (e.ip().is_v4() != v4) {
      continue;
    }
    // A backend on another node is SNATed to this node (as kube-proxy masquerades eTP
    // Cluster), so that its replies come back here to be translated; external endpoints of
    // eTP Local are this node's only.
    if (!OnNode(info, e, context.node_name)) {
      svc.remote.push_back(e.ip());
    }
    svc.backends.push_back(e);
  }
  std::sort(svc.remote.begin(), svc.remote.end());
  svc.remote.erase(std::unique(svc.remote.begin(), svc.remote.end()), svc.remote.end());
  // No endpoint: the proxy refuses, as kube-proxy's reject rule does.
  if (svc.backends.empty()) {
    return std::nullopt;
  }
  for (const auto& ip : info.external_ips) {
    if (ip.is_v4() != v4) {
      continue;
    }
    svc.frontends.push_back({net::SocketAddress(ip, info.port), udp});
    if (std::vector<net::Cidr> ranges = SourceRangesFor(info, ip); !ranges.empty()) {
      svc.source_ranges.emplace(ip, std::move(ranges));
    }
  }
  if (info.node_port > 0) {
    for (const auto& ip : context.node_ips) {
      // Loopback is never reached from another machine.
      if (ip.is_v4() == v4 && !ip.IsLoopback()) {
        svc.frontends.push_back({net::SocketAddress(ip, info.node_port), udp});
      }
    }
  }
  if (svc.frontends.empty()) {
    return std::nullopt;
  }
  NodeOrder(name, context.node_name, svc.backends);
  if (info.client_ip_affinity) {
    svc.affinity = info.affinity_timeout;
  }
  svc.random = context.random;
  return svc;
}

}  // namespace

void ExternalNatChanges(const ServicePortName& port, const ServicePortInfo* info,
                        const ExternalNatContext& context, std::vector<extnat::Change>& out) {
  // SCTP is not served (the proxy does not serve it either): its names are removed.
  const bool served = info != nullptr && (port.protocol == config::Protocol::kUdp ||
                                          port.protocol == config::Protocol::kTcp);
  for (bool v4 : {true, false}) {
    std::string name = Name(port, v4);
    std::optional<extnat::Service> svc;
    if (served) {
      svc = Family(name, *info, context, v4);
    }
    out.emplace_back(std::move(name), std::move(svc));
  }
}

}  // namespace sluice::proxier
