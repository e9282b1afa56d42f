// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "lib/base/cow_map.h"
#include "lib/net/address.h"

#include "agent/control/config/model.h"

namespace sluice::proxier {

// "namespace/name:port-name" plus protocol: one proxied service port.
struct ServicePortName {
  config::NamespacedName service;
  std::string port;
  config::Protocol protocol = config::Protocol::kTcp;
  std::string ToString() const;
  friend bool operator==(const ServicePortName&, const ServicePortName&) = default;
  friend auto operator<=>(const ServicePortName&, const ServicePortName&) = default;
};

struct EndpointInfo {
  net::SocketAddress address;
  bool ready = true;
  bool serving = true;
  bool terminating = false;
  std::string node_name;
  std::string zone;
  friend bool operator==(const EndpointInfo&, const EndpointInfo&) = default;
};

// Everything the data path needs to serve one service port. Immutable once built.
struct ServicePortInfo {
  ServicePortName name;
  int port = 0;
  int node_port = 0;
  std::vector<net::IpAddress> cluster_ips;
  std::vector<net::IpAddress> external_ips;  // spec.externalIPs and LoadBalancer ingress IPs
  // The LoadBalancer ingress IPs alone (also in external_ips): loadBalancerSourceRanges guard
  // only these, as kube-proxy's firewall chain does.
  std::vector<net::IpAddress> load_balancer_ips;
  // spec.loadBalancerSourceRanges of type LoadBalancer services. Per family, as kube-proxy's
  // per-family proxiers: a family without ranges is not filtered.
  std::vector<net::Cidr> source_ranges;
  int health_check_node_port = 0;  // spec.healthCheckNodePort; 0 = none
  bool client_ip_affinity = false;
  absl::Duration affinity_timeout = absl::Seconds(config::kDefaultAffinityTimeoutSeconds);
  config::TrafficPolicy internal_policy = config::TrafficPolicy::kCluster;
  config::TrafficPolicy external_policy = config::TrafficPolicy::kCluster;
  // Every endpoint of the port, deduplicated by address+port, sorted.
  std::vector<EndpointInfo> endpoints;
  // The endpoints selected for ClusterIP traffic and for NodePort/external/LB traffic after
  // readiness fallback, traffic policy and topology hints. Empty = refuse.
  std::vector<net::SocketAddress> cluster_endpoints;
  std::vector<net::SocketAddress> external_endpoints;
  friend bool operator==(const ServicePortInfo&, const ServicePortInfo&) = default;
};
using ServicePortInfoPtr = std::shared_ptr<const ServicePortInfo>;

// The source ranges that guard `ip` as a frontend of `info`: those of its family when `ip` is
// one of its LoadBalancer IPs, else none (every source is served).
std::vector<net::Cidr> SourceRangesFor(const ServicePortInfo& info, const net::IpAddress& ip);

// What this node is, for traffic policy Local and topology hints.
struct NodeInfo {
  std::string name;                // --hostname-override or the hostname
  std::string zone;                // --zone (or the Node's topology label); "" = unknown
  std::string service_proxy_name;  // --service-proxy-name; "" = serve unlabelled services only
};

// Whether a service is programmed at all (headless, ExternalName, other proxies' services and
// services without a cluster IP are not).
bool ShouldProgram(const config::Service& svc, const NodeInfo& node);

// Builds the entries of one service from its slices (the slices labelled with its name).
std::vector<ServicePortInfoPtr> BuildServicePorts(
    const config::Service& svc, const std::vector<config::EndpointSlicePtr>& slices,
    const NodeInfo& node);

// Service ports by name. A copy shares the entries (see base::CowMap), so the Proxier keeps one
// and publishes a copy each sync.
using ServicePortMap = base::CowMap<ServicePortName, ServicePortInfoPtr>;

// The merged, programmed view: an immutable snapshot handed to the data path and the admin
// endpoints. Thread-safe (immutable).
class ServiceTable final {
 public:
  ServiceTable() = default;
  explicit ServiceTable(ServicePortMap ports) : ports_(std::move(ports)) {}
  explicit ServiceTable(const std::map<ServicePortName, ServicePortInfoPtr>& ports)
      : ports_(ports) {}
  const ServicePortMap& ports() const { return ports_; }
  const ServicePortInfo* Find(const ServicePortName& name) const;
  // The entry of `name`; null when there is none.
  ServicePortInfoPtr Get(const ServicePortName& name) const;

 private:
  ServicePortMap ports_;
};

// One service port a sync added (`prev` null), removed (`cur` null) or changed (both set: a new
// object; an unchanged port keeps its object from sync to sync).
struct PortChange {
  ServicePortName name;
  ServicePortInfoPtr prev;
  ServicePortInfoPtr cur;
};

}  // namespace sluice::proxier
