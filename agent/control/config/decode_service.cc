// SPDX-License-Identifier: Apache-2.0
// v1 Service: the fields a service proxy acts on, validated as the API server would.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

#include "agent/control/config/decode_objects.h"

namespace sluice::config {
namespace {

using base::Absl;

constexpr EnumName<ServiceType> kServiceTypes[] = {
    {"ClusterIP", ServiceType::kClusterIP},
    {"NodePort", ServiceType::kNodePort},
    {"LoadBalancer", ServiceType::kLoadBalancer},
    {"ExternalName", ServiceType::kExternalName},
};
constexpr EnumName<SessionAffinity> kAffinities[] = {
    {"None", SessionAffinity::kNone},
    {"ClientIP", SessionAffinity::kClientIP},
};
constexpr EnumName<TrafficPolicy> kTrafficPolicies[] = {
    {"Cluster", TrafficPolicy::kCluster},
    {"Local", TrafficPolicy::kLocal},
};

constexpr std::string_view kHeadlessClusterIp = "None";

// One entry of clusterIP/clusterIPs: "None" (headless, alone) or up to one IP per family.
absl::Status AddClusterIp(const Field& at, std::string_view text, Service& s, unsigned refused) {
  if (s.headless || (text == kHeadlessClusterIp && !s.cluster_ips.empty())) {
    return at.Error("\"None\" (headless) must be the only cluster IP");
  }
  if (text == kHeadlessClusterIp) {
    s.headless = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(AppendIp(at, text, &s.cluster_ips, refused));
  if (s.cluster_ips.size() > 2) {
    return at.Error("at most 2 cluster IPs (one per IP family) are allowed");
  }
  if (s.cluster_ips.size() == 2 && s.cluster_ips[0].family() == s.cluster_ips[1].family()) {
    return at.Error("a second cluster IP must be of the other IP family (dual-stack)");
  }
  return absl::OkStatus();
}

// spec.clusterIP is the first of spec.clusterIPs when both are set (the API server enforces
// it); clusterIPs alone or clusterIP alone is fine. "" means not allocated.
absl::Status DecodeClusterIps(const ObjectField& spec, Service& s, unsigned refused) {
  std::string_view primary;
  std::optional<Field> single = spec.Get("clusterIP");
  if (single) {
    ASSIGN_OR_RETURN(primary, single->String());
  }
  size_t listed = 0;
  if (std::optional<Field> list = spec.Get("clusterIPs")) {
    RETURN_IF_ERROR(list->ForEach([&](const Field& item, size_t index) -> absl::Status {
      ASSIGN_OR_RETURN(std::string_view text, item.String());
      if (index == 0 && !primary.empty() && text != primary) {
        return item.Error(absl::StrCat("must equal spec.clusterIP \"", Absl(primary), "\", got \"",
                                       Absl(text), "\""));
      }
      ++listed;
      return AddClusterIp(item, text, s, refused);
    }));
  }
  if (listed == 0 && !primary.empty()) {
    return AddClusterIp(*single, primary, s, refused);
  }
  return absl::OkStatus();
}

// targetPort is an IntOrString: a port number, or the name of a container port.
absl::Status DecodeTargetPort(const ObjectField& port, TargetPort& target) {
  std::optional<Field> field = port.Get("targetPort");
  if (!field) {
    return absl::OkStatus();
  }
  if (!field->value().is_string()) {
    if (!field->value().is_int64() && !field->value().is_uint64()) {
      return field->TypeError("integer or string");
    }
    ASSIGN_OR_RETURN(target.number, field->Int(1, 65535));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string_view name, field->String());
  if (name.empty()) {
    return field->Error("must be a port number or a non-empty port name");
  }
  target.name.assign(name);
  return absl::OkStatus();
}

absl::Status DecodeServicePort(const ObjectField& object, ServicePort& port) {
  RETURN_IF_ERROR(object.ReadString("name", &port.name));
  RETURN_IF_ERROR(object.ReadEnum("protocol", kProtocols, &port.protocol));
  ASSIGN_OR_RETURN(Field number, object.Require("port"));
  ASSIGN_OR_RETURN(port.port, number.Int(1, 65535));
  RETURN_IF_ERROR(DecodeTargetPort(object, port.target_port));
  RETURN_IF_ERROR(object.ReadInt("nodePort", 0, 65535, &port.node_port));
  return object.ReadString("appProtocol", &port.app_protocol);
}

// Endpoint ports are matched to service ports by name, hence names are required and unique
// once there is more than one port.
absl::Status DecodeServicePorts(const ObjectField& spec, std::vector<ServicePort>& ports) {
  std::optional<Field> list = spec.Get("ports");
  if (!list) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(simdjson::dom::array array, list->Array());
  const size_t count = array.size();
  ports.reserve(count);
  // Sets, not a scan of the earlier ports: a Service may carry tens of thousands of ports.
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<std::pair<int, Protocol>> numbers;
  names.reserve(count);
  numbers.reserve(count);
  return list->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(ObjectField object, ObjectField::Of(item));
    ServicePort port;
    RETURN_IF_ERROR(DecodeServicePort(object, port));
    if (count > 1 && port.name.empty()) {
      return object.Error("name", "required when the service has more than one port");
    }
    if (!port.name.empty() && !names.insert(port.name).second) {
      return object.Error("name", absl::StrCat("duplicate name \"", port.name, "\""));
    }
    if (!numbers.emplace(port.port, port.protocol).second) {
      return item.Error(
          absl::StrCat("duplicate port ", port.port, "/", ProtocolName(port.protocol)));
    }
    ports.push_back(std::move(port));
    return absl::OkStatus();
  });
}

absl::Status DecodeIpList(const ObjectField& object, std::string_view key,
                          std::vector<net::IpAddress>* out, unsigned refused) {
  std::optional<Field> list = object.Get(key);
  if (!list) {
    return absl::OkStatus();
  }
  return list->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(std::string_view text, item.String());
    return AppendIp(item, text, out, refused);
  });
}

// Kept as text for the consumer; validated (after trimming, as the API server does) so that a
// typo is reported here rather than silently opening or closing a firewall.
absl::Status DecodeSourceRanges(const ObjectField& spec, std::vector<std::string>* out) {
  std::optional<Field> list = spec.Get("loadBalancerSourceRanges");
  if (!list) {
    return absl::OkStatus();
  }
  return list->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(std::string_view text, item.String());
    std::string_view cidr = base::Std(absl::StripAsciiWhitespace(Absl(text)));
    if (!net::Cidr::Parse(cidr)) {
      return item.Error(
          absl::StrCat("must be a CIDR such as 10.0.0.0/8, got \"", Absl(text), "\""));
    }
    out->emplace_back(cidr);
    return absl::OkStatus();
  });
}

absl::Status DecodeSessionAffinity(const ObjectField& spec, Service& s) {
  RETURN_IF_ERROR(spec.ReadEnum("sessionAffinity", kAffinities, &s.session_affinity));
  ASSIGN_OR_RETURN(std::optional<ObjectField> config, spec.GetObject("sessionAffinityConfig"));
  if (!config) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::optional<ObjectField> client_ip, config->GetObject("clientIP"));
  if (!client_ip) {
    return absl::OkStatus();
  }
  return client_ip->ReadInt("timeoutSeconds", 1, kMaxAffinityTimeoutSeconds,
                            &s.affinity_timeout_seconds);
}

absl::Status DecodeServiceSpec(const ObjectField& spec, Service& s, const AddressPolicy& policy) {
  RETURN_IF_ERROR(spec.ReadEnum("type", kServiceTypes, &s.type));
  RETURN_IF_ERROR(DecodeClusterIps(spec, s, RefusedRanges(policy, AddressField::kClusterIp)));
  RETURN_IF_ERROR(DecodeServicePorts(spec, s.ports));
  RETURN_IF_ERROR(DecodeIpList(spec, "externalIPs", &s.external_ips,
                               RefusedRanges(policy, AddressField::kExternalIp)));
  RETURN_IF_ERROR(DecodeSourceRanges(spec, &s.load_balancer_source_ranges));
  RETURN_IF_ERROR(spec.ReadString("externalName", &s.external_name));
  RETURN_IF_ERROR(DecodeSessionAffinity(spec, s));
  RETURN_IF_ERROR(
      spec.ReadEnum("internalTrafficPolicy", kTrafficPolicies, &s.internal_traffic_policy));
  RETURN_IF_ERROR(
      spec.ReadEnum("externalTrafficPolicy", kTrafficPolicies, &s.external_traffic_policy));
  return spec.ReadInt("healthCheckNodePort", 0, 65535, &s.health_check_node_port);
}

// status.loadBalancer.ingress[].ip; entries with only a hostname (AWS ELB style) carry no
// address to serve and are skipped.
absl::Status DecodeServiceStatus(const ObjectField& status, Service& s, unsigned refused) {
  ASSIGN_OR_RETURN(std::optional<ObjectField> lb, status.GetObject("loadBalancer"));
  if (!lb) {
    return absl::OkStatus();
  }
  std::optional<Field> ingress = lb->Get("ingress");
  if (!ingress) {
    return absl::OkStatus();
  }
  return ingress->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(ObjectField entry, ObjectField::Of(item));
    std::optional<Field> ip = entry.Get("ip");
    if (!ip) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(std::string_view text, ip->String());
    return text.empty() ? absl::OkStatus() : AppendIp(*ip, text, &s.load_balancer_ingress, refused);
  });
}

}  // namespace

absl::StatusOr<ServicePtr> DecodeServiceObject(const ObjectField& object,
                                               std::string_view implied_api_version,
                                               const AddressPolicy& policy) {
  RETURN_IF_ERROR(CheckApiVersion(object, "v1", implied_api_version));
  auto service = std::make_shared<Service>();
  RETURN_IF_ERROR(DecodeObjectMeta(object, &service->meta));
  ASSIGN_OR_RETURN(std::optional<ObjectField> spec, object.GetObject("spec"));
  if (spec) {
    RETURN_IF_ERROR(DecodeServiceSpec(*spec, *service, policy));
  }
  ASSIGN_OR_RETURN(std::optional<ObjectField> status, object.GetObject("status"));
  if (status) {
    RETURN_IF_ERROR(
        DecodeServiceStatus(*status, *service, RefusedRanges(policy, AddressField::kIngressIp)));
  }
  return ServicePtr(std::move(service));
}

}  // namespace sluice::config
