// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lib/net/address.h"

// The subset of Kubernetes v1 Service and discovery.k8s.io/v1 EndpointSlice that a service proxy
// acts on (see docs/configuration.md for the field list). Objects are immutable once decoded and
// shared as std::shared_ptr<const T> between stores, trackers and snapshots.

namespace sluice::config {

// "namespace/name": the identity of an object within one kind.
struct NamespacedName {
  std::string ns;
  std::string name;
  std::string ToString() const { return ns + "/" + name; }
  friend bool operator==(const NamespacedName&, const NamespacedName&) = default;
  friend auto operator<=>(const NamespacedName&, const NamespacedName&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const NamespacedName& n) {
    return H::combine(std::move(h), n.ns, n.name);
  }
};

struct ObjectMeta {
  NamespacedName id;
  std::string uid;
  std::string resource_version;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  friend bool operator==(const ObjectMeta&, const ObjectMeta&) = default;
};

enum class Protocol { kTcp, kUdp, kSctp };
const char* ProtocolName(Protocol p);  // "TCP", "UDP", "SCTP"

// spec.ports[].targetPort: a number, or the name of a container port.
struct TargetPort {
  int number = 0;    // 0 when named or unset (unset means "same as port")
  std::string name;  // non-empty when named
  friend bool operator==(const TargetPort&, const TargetPort&) = default;
};

struct ServicePort {
  std::string name;
  Protocol protocol = Protocol::kTcp;
  int port = 0;
  TargetPort target_port;
  int node_port = 0;  // 0 = none
  std::string app_protocol;
  friend bool operator==(const ServicePort&, const ServicePort&) = default;
};

enum class ServiceType { kClusterIP, kNodePort, kLoadBalancer, kExternalName };
enum class SessionAffinity { kNone, kClientIP };
enum class TrafficPolicy { kCluster, kLocal };

inline constexpr int kDefaultAffinityTimeoutSeconds = 10800;
inline constexpr int kMaxAffinityTimeoutSeconds = 86400;

struct Service {
  ObjectMeta meta;
  ServiceType type = ServiceType::kClusterIP;
  // spec.clusterIP / spec.clusterIPs; headless ("None") is recorded, not dropped, so that
  // "ClusterIP None and back" is a visible change. Empty cluster_ips with !headless = unallocated.
  bool headless = false;
  std::vector<net::IpAddress> cluster_ips;
  std::vector<ServicePort> ports;
  std::vector<net::IpAddress> external_ips;
  std::vector<net::IpAddress> load_balancer_ingress;  // status.loadBalancer.ingress[].ip
  std::vector<std::string> load_balancer_source_ranges;
  std::string external_name;
  SessionAffinity session_affinity = SessionAffinity::kNone;
  int affinity_timeout_seconds = kDefaultAffinityTimeoutSeconds;
  TrafficPolicy internal_traffic_policy = TrafficPolicy::kCluster;
  TrafficPolicy external_traffic_policy = TrafficPolicy::kCluster;
  int health_check_node_port = 0;
  friend bool operator==(const Service&, const Service&) = default;
};

// endpoints[].conditions: nil means ready, serving (when nil follows ready) and not terminating.
struct EndpointConditions {
  std::optional<bool> ready;
  std::optional<bool> serving;
  std::optional<bool> terminating;
  bool IsReady() const { return ready.value_or(true); }
  bool IsServing() const { return serving.value_or(IsReady()); }
  bool IsTerminating() const { return terminating.value_or(false); }
  friend bool operator==(const EndpointConditions&, const EndpointConditions&) = default;
};

struct Endpoint {
  std::vector<net::IpAddress> addresses;  // empty for addressType FQDN (ignored by the proxy)
  EndpointConditions conditions;
  std::string hostname;
  std::string node_name;
  std::string zone;
  bool has_hints = false;               // hints.forZones present
  std::vector<std::string> hint_zones;  // hints.forZones[].name
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};

struct EndpointPort {
  std::string name;
  Protocol protocol = Protocol::kTcp;
  std::optional<int> port;  // nil = all ports (not used by services with ports)
  std::string app_protocol;
  friend bool operator==(const EndpointPort&, const EndpointPort&) = default;
};

enum class AddressType { kIPv4, kIPv6, kFqdn };

inline constexpr char kServiceNameLabel[] = "kubernetes.io/service-name";
inline constexpr char kServiceProxyNameLabel[] = "service.kubernetes.io/service-proxy-name";
inline constexpr char kHeadlessLabel[] = "service.kubernetes.io/headless";
inline constexpr char kLastChangeTriggerTimeAnnotation[] =
    "endpoints.kubernetes.io/last-change-trigger-time";

struct EndpointSlice {
  ObjectMeta meta;
  AddressType address_type = AddressType::kIPv4;
  std::string service_name;  // the kubernetes.io/service-name label; empty = orphan
  std::vector<Endpoint> endpoints;
  std::vector<EndpointPort> ports;
  friend bool operator==(const EndpointSlice&, const EndpointSlice&) = default;
};

using ServicePtr = std::shared_ptr<const Service>;
using EndpointSlicePtr = std::shared_ptr<const EndpointSlice>;

}  // namespace sluice::config
