// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/service_table.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace sluice::proxier {

using config::EndpointSlice;
using config::Service;

std::string ServicePortName::ToString() const { return service.ToString() + ":" + port; }

const ServicePortInfo* ServiceTable::Find(const ServicePortName& name) const {
  auto it = ports_.find(name);
  return it == ports_.end() ? nullptr : it->second.get();
}

ServicePortInfoPtr ServiceTable::Get(const ServicePortName& name) const {
  auto it = ports_.find(name);
  return it == ports_.end() ? nullptr : it->second;
}

std::vector<net::Cidr> SourceRangesFor(const ServicePortInfo& info, const net::IpAddress& ip) {
  std::vector<net::Cidr> out;
  if (std::find(info.load_balancer_ips.begin(), info.load_balancer_ips.end(), ip) ==
      info.load_balancer_ips.end()) {
    return out;
  }
  for (const net::Cidr& cidr : info.source_ranges) {
    if (cidr.base().is_v4() == ip.is_v4()) {
      out.push_back(cidr);  // kube-proxy's proxiers are per family: one without ranges is open
    }
  }
  return out;
}

bool ShouldProgram(const Service& svc, const NodeInfo& node) {
  if (svc.headless || svc.cluster_ips.empty() || svc.type == config::ServiceType::kExternalName) {
    return false;
  }
  auto it = svc.meta.labels.find(config::kServiceProxyNameLabel);
  if (node.service_proxy_name.empty()) {
    return it == svc.meta.labels.end();  // kube-proxy skips any value
  }
  return it != svc.meta.labels.end() && it->second == node.service_proxy_name;
}

namespace {

// Ready endpoints; when there are none, the serving and terminating ones (so connections keep
// working while every pod of a rollout terminates).
std::vector<const EndpointInfo*> UsableEndpoints(const std::vector<const EndpointInfo*>& all) {
  std::vector<const EndpointInfo*> out;
  for (const auto* e : all) {
    if (e->ready) {
      out.push_back(e);
    }
  }
  if (out.empty()) {
    for (const auto* e : all) {
      if (e->serving && e->terminating) {
        out.push_back(e);
      }
    }
  }
  return out;
}

// Topology-aware hints: only when every endpoint carries hints and our zone is known.
std::vector<const EndpointInfo*> ApplyHints(
    const std::vector<const EndpointInfo*>& usable,
    const std::map<net::SocketAddress, const config::Endpoint*>& source, const NodeInfo& node) {
  if (node.zone.empty() || usable.empty()) {
    return usable;
  }
  std::vector<const EndpointInfo*> out;
  for (const auto* e : usable) {
    const config::Endpoint* ep = source.at(e->address);
    if (!ep->has_hints) {
      return usable;
    }
    if (std::find(ep->hint_zones.begin(), ep->hint_zones.end(), node.zone) !=
        ep->hint_zones.end()) {
      out.push_back(e);
    }
  }
  return out.empty() ? usable : out;  // no endpoint hinted for us: use them all, as kube-proxy
}

std::vector<net::SocketAddress> Select(
    const std::vector<EndpointInfo>& endpoints,
    const std::map<net::SocketAddress, const config::Endpoint*>& source,
    config::TrafficPolicy policy, const NodeInfo& node) {
  std::vector<const EndpointInfo*> candidates;
  for (const auto& e : endpoints) {
    if (policy == config::TrafficPolicy::kCluster || e.node_name == node.name) {
      candidates.push_back(&e);
    }
  }
  std::vector<const EndpointInfo*> chosen = UsableEndpoints(candidates);
  if (policy == config::TrafficPolicy::kCluster) {
    chosen = ApplyHints(chosen, source, node);
  }
  std::vector<net::SocketAddress> out;
  out.reserve(chosen.size());
  for (const auto* e : chosen) {
    out.push_back(e->address);
  }
  return out;
}

std::string PortKey(const config::ServicePort& p) { return p.name; }

}  // namespace

namespace {

// The endpoint ports of a Service's slices by (name, protocol), in slice and port order: one
// lookup per service port instead of a scan of every slice port, which cost seconds for a
// Service of 20,000 ports.
using EndpointPortIndex = absl::flat_hash_map<std::pair<std::string_view, config::Protocol>,
                                              std::vector<std::pair<const EndpointSlice*, int>>>;
const std::vector<std::pair<const EndpointSlice*, int>> kNoPorts;

EndpointPortIndex IndexEndpointPorts(const std::vector<config::EndpointSlicePtr>& slices) {
  EndpointPortIndex index;
  for (const auto& slice : slices) {
    if (slice->address_type == config::AddressType::kFqdn) {
      continue;
    }
    for (const auto& ep_port : slice->ports) {
      if (ep_port.port) {
        index[{ep_port.name, ep_port.protocol}].emplace_back(slice.get(), *ep_port.port);
      }
    }
  }
  return index;
}

}  // namespace

std::vector<ServicePortInfoPtr> BuildServicePorts(
    const Service& svc, const std::vector<config::EndpointSlicePtr>& slices, const NodeInfo& node) {
  std::vector<ServicePortInfoPtr> out;
  // The decoder has validated every range.
  std::vector<net::Cidr> ranges;
  for (const auto& text : svc.load_balancer_source_ranges) {
    if (auto cidr = net::Cidr::Parse(text)) {
      ranges.push_back(cidr->Network());
    }
  }
  const EndpointPortIndex by_name = IndexEndpointPorts(slices);
  for (const auto& sp : svc.ports) {
    auto info = std::make_shared<ServicePortInfo>();
    info->name = {svc.meta.id, PortKey(sp), sp.protocol};
    info->port = sp.port;
    info->node_port = sp.node_port;
    info->cluster_ips = svc.cluster_ips;
    info->external_ips = svc.external_ips;
    for (const auto& ip : svc.load_balancer_ingress) {
      if (std::find(info->external_ips.begin(), info->external_ips.end(), ip) ==
          info->external_ips.end()) {
        info->external_ips.push_back(ip);
      }
    }
    info->load_balancer_ips = svc.load_balancer_ingress;
    info->source_ranges = ranges;
    // As the API server allocates it, and kube-proxy serves it: eTP Local LoadBalancers only
    // (the file and etcd sources skip the API server's validation).
    if (svc.type == config::ServiceType::kLoadBalancer &&
        svc.external_traffic_policy == config::TrafficPolicy::kLocal) {
      info->health_check_node_port = svc.health_check_node_port;
    }
    info->client_ip_affinity = svc.session_affinity == config::SessionAffinity::kClientIP;
    info->affinity_timeout = absl::Seconds(svc.affinity_timeout_seconds);
    info->internal_policy = svc.internal_traffic_policy;
    info->external_policy = svc.external_traffic_policy;

    // Service ports map to endpoint ports by name (and protocol); duplicates across slices
    // (a pod moving between slices) are merged by address+port, first seen wins.
    std::map<net::SocketAddress, const config::Endpoint*> source;
    auto matching = by_name.find({sp.name, sp.protocol});
    for (const auto& [slice, port] : matching == by_name.end() ? kNoPorts : matching->second) {
      for (const auto& ep : slice->endpoints) {
        for (const auto& ip : ep.addresses) {
          net::SocketAddress addr(ip, static_cast<uint16_t>(port));
          if (source.emplace(addr, &ep).second) {
            info->endpoints.push_back(
                EndpointInfo{addr, ep.conditions.IsReady(), ep.conditions.IsServing(),
                             ep.conditions.IsTerminating(), ep.node_name, ep.zone});
          }
        }
      }
    }
    std::sort(info->endpoints.begin(), info->endpoints.end(),
              [](const EndpointInfo& a, const EndpointInfo& b) { return a.address < b.address; });
    info->cluster_endpoints = Select(info->endpoints, source, info->internal_policy, node);
    info->external_endpoints = Select(info->endpoints, source, info->external_policy, node);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace sluice::proxier
