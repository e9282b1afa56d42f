// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/debug_services.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/json.h"

namespace sluice::admin {

namespace {

using base::JsonString;

template <typename T, typename Fn>
std::string Array(const std::vector<T>& items, Fn fn) {
  std::vector<std::string> parts;
  parts.reserve(items.size());
  for (const auto& item : items) {
    parts.push_back(fn(item));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string Ips(const std::vector<net::IpAddress>& ips) {
  return Array(ips, [](const net::IpAddress& ip) { return JsonString(ip.ToString()); });
}

std::string Addrs(const std::vector<net::SocketAddress>& addrs) {
  return Array(addrs, [](const net::SocketAddress& a) { return JsonString(a.ToString()); });
}

const char* Policy(config::TrafficPolicy p) {
  return p == config::TrafficPolicy::kLocal ? "Local" : "Cluster";
}

std::string Endpoint(const proxier::EndpointInfo& e) {
  return absl::StrCat(
      "{\"address\": ", JsonString(e.address.ToString()),
      ", \"ready\": ", e.ready ? "true" : "false", ", \"serving\": ", e.serving ? "true" : "false",
      ", \"terminating\": ", e.terminating ? "true" : "false",
      ", \"nodeName\": ", JsonString(e.node_name), ", \"zone\": ", JsonString(e.zone), "}");
}

std::string Strings(const std::vector<std::string>& v) {
  return Array(v, [](const std::string& s) { return JsonString(s); });
}

std::string Cidrs(const std::vector<net::Cidr>& cidrs) {
  return Array(cidrs, [](const net::Cidr& c) { return JsonString(c.ToString()); });
}

std::string Port(const proxier::ServicePortInfo& p, const std::vector<std::string>& listeners,
                 const std::vector<std::string>& socket_lb,
                 const std::vector<std::string>& external_bpf, const std::string* unserved) {
  return absl::StrCat(
      "{\"service\": ", JsonString(p.name.service.ToString()),
      ", \"port\": ", JsonString(p.name.port),
      ", \"protocol\": ", JsonString(config::ProtocolName(p.name.protocol)),
      ", \"servicePort\": ", p.port, ", \"nodePort\": ", p.node_port,
      ", \"clusterIPs\": ", Ips(p.cluster_ips), ", \"externalIPs\": ", Ips(p.external_ips),
      ", \"loadBalancerIPs\": ", Ips(p.load_balancer_ips),
      ", \"loadBalancerSourceRanges\": ", Cidrs(p.source_ranges),
      ", \"healthCheckNodePort\": ", p.health_check_node_port,
      ", \"sessionAffinity\": ", JsonString(p.client_ip_affinity ? "ClientIP" : "None"),
      ", \"affinityTimeoutSeconds\": ", absl::ToInt64Seconds(p.affinity_timeout),
      ", \"internalTrafficPolicy\": \"", Policy(p.internal_policy),
      "\", \"externalTrafficPolicy\": \"", Policy(p.external_policy),
      "\", \"clusterEndpoints\": ", Addrs(p.cluster_endpoints),
      ", \"externalEndpoints\": ", Addrs(p.external_endpoints),
      ", \"endpoints\": ", Array(p.endpoints, Endpoint), ", \"listeners\": ", Strings(listeners),
      ", \"socketLb\": ", Strings(socket_lb), ", \"externalBpf\": ", Strings(external_bpf),
      unserved != nullptr ? absl::StrCat(", \"unserved\": ", JsonString(*unserved)) : "", "}");
}

}  // namespace

std::string RenderDebugServices(const proxier::ServiceTable& table, const PortStates& states) {
  static const std::vector<std::string> kNone;
  auto find = [](const auto& m, const std::string& key) -> const std::vector<std::string>& {
    auto it = m.find(key);
    return it == m.end() ? kNone : it->second;
  };
  std::vector<std::string> parts;
  for (const auto& [name, info] : table.ports()) {
    const std::string key = name.ToString();
    auto unserved = states.unserved.find(key);
    parts.push_back(Port(*info, find(states.listeners, key), find(states.socket_lb, key),
                         find(states.external_bpf, key),
                         unserved == states.unserved.end() ? nullptr : &unserved->second));
  }
  return absl::StrCat("{\"servicePorts\": [\n  ", absl::StrJoin(parts, ",\n  "), "\n]}\n");
}

std::string RenderDebugConnections(const std::vector<proxy::ConnectionInfo>& connections) {
  std::vector<std::string> parts;
  parts.reserve(connections.size());
  for (const auto& c : connections) {
    parts.push_back(
        absl::StrCat("{\"worker\": ", c.worker, ", \"listener\": ", JsonString(c.listener),
                     ", \"client\": ", JsonString(c.client),
                     ", \"backend\": ", JsonString(c.backend), ", \"path\": ", JsonString(c.path),
                     ", \"toBackend\": {\"state\": ", JsonString(c.to_backend), ", \"bytes\": ",
                     c.bytes_to_backend, "}, \"toClient\": {\"state\": ", JsonString(c.to_client),
                     ", \"bytes\": ", c.bytes_to_client, "}}"));
  }
  return absl::StrCat("{\"connections\": [\n  ", absl::StrJoin(parts, ",\n  "), "\n]}\n");
}

}  // namespace sluice::admin
