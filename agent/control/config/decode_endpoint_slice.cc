// SPDX-License-Identifier: Apache-2.0
// discovery.k8s.io/v1 EndpointSlice: the fields a service proxy acts on.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

#include "agent/control/config/decode_objects.h"

namespace sluice::config {
namespace {

constexpr EnumName<AddressType> kAddressTypes[] = {
    {"IPv4", AddressType::kIPv4},
    {"IPv6", AddressType::kIPv6},
    {"FQDN", AddressType::kFqdn},
};

// The API server's limit per endpoint (maxAddresses in the discovery validation).
constexpr size_t kMaxAddresses = 100;

// IPv4/IPv6 slices hold addresses of that family only. FQDN endpoints are not proxied (kube-proxy
// ignores them), so their names are checked to be strings and not kept.
absl::Status DecodeAddresses(const ObjectField& endpoint, AddressType type,
                             std::vector<net::IpAddress>* out, unsigned refused) {
  ASSIGN_OR_RETURN(Field list, endpoint.Require("addresses"));
  ASSIGN_OR_RETURN(simdjson::dom::array array, list.Array());
  const size_t count = array.size();
  if (count == 0 || count > kMaxAddresses) {
    return list.Error(absl::StrCat("must hold 1 to ", kMaxAddresses, " addresses, got ", count));
  }
  if (type != AddressType::kFqdn) {
    out->reserve(count);
  }
  return list.ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(std::string_view text, item.String());
    if (type == AddressType::kFqdn) {
      return absl::OkStatus();
    }
    // IpAddress folds IPv4-mapped IPv6 into IPv4, which is also how the API server's
    // validation classifies "::ffff:10.0.0.1" (To4() != nil): valid IPv4, invalid IPv6.
    std::optional<net::IpAddress> ip = net::IpAddress::Parse(text);
    const bool want_v4 = type == AddressType::kIPv4;
    if (!ip || ip->is_v4() != want_v4) {
      return item.Error(absl::StrCat("must be an ", want_v4 ? "IPv4" : "IPv6",
                                     " address (addressType), got \"", base::Absl(text), "\""));
    }
    RETURN_IF_ERROR(CheckSpecialIp(item, text, *ip, refused));
    out->push_back(*ip);
    return absl::OkStatus();
  });
}

absl::Status DecodeConditions(const ObjectField& endpoint, EndpointConditions& conditions) {
  ASSIGN_OR_RETURN(std::optional<ObjectField> object, endpoint.GetObject("conditions"));
  if (!object) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(object->ReadBool("ready", &conditions.ready));
  RETURN_IF_ERROR(object->ReadBool("serving", &conditions.serving));
  return object->ReadBool("terminating", &conditions.terminating);
}

// has_hints follows kube-proxy (pkg/proxy/topology.go): an endpoint whose forZones is empty
// counts as carrying no hints, which turns topology off for the service rather than dropping
// the endpoint.
absl::Status DecodeHints(const ObjectField& endpoint, Endpoint& out) {
  ASSIGN_OR_RETURN(std::optional<ObjectField> hints, endpoint.GetObject("hints"));
  if (!hints) {
    return absl::OkStatus();
  }
  std::optional<Field> zones = hints->Get("forZones");
  if (!zones) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(zones->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(ObjectField zone, ObjectField::Of(item));
    ASSIGN_OR_RETURN(Field name, zone.Require("name"));
    ASSIGN_OR_RETURN(std::string_view text, name.String());
    if (text.empty()) {
      return name.Error("required");
    }
    out.hint_zones.emplace_back(text);
    return absl::OkStatus();
  }));
  out.has_hints = !out.hint_zones.empty();
  return absl::OkStatus();
}

absl::Status DecodeEndpoints(const ObjectField& object, EndpointSlice& slice, unsigned refused) {
  std::optional<Field> list = object.Get("endpoints");
  if (!list) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(simdjson::dom::array array, list->Array());
  slice.endpoints.reserve(array.size());
  return list->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(ObjectField endpoint, ObjectField::Of(item));
    Endpoint& ep = slice.endpoints.emplace_back();
    RETURN_IF_ERROR(DecodeAddresses(endpoint, slice.address_type, &ep.addresses, refused));
    RETURN_IF_ERROR(DecodeConditions(endpoint, ep.conditions));
    RETURN_IF_ERROR(endpoint.ReadString("hostname", &ep.hostname));
    RETURN_IF_ERROR(endpoint.ReadString("nodeName", &ep.node_name));
    RETURN_IF_ERROR(endpoint.ReadString("zone", &ep.zone));
    return DecodeHints(endpoint, ep);
  });
}

// ports[].port null means "all ports" in the API; the proxy has no use for it but keeps it.
absl::Status DecodeEndpointPorts(const ObjectField& object, std::vector<EndpointPort>& ports) {
  std::optional<Field> list = object.Get("ports");
  if (!list) {
    return absl::OkStatus();
  }
  return list->ForEach([&](const Field& item, size_t) -> absl::Status {
    ASSIGN_OR_RETURN(ObjectField port, ObjectField::Of(item));
    EndpointPort& out = ports.emplace_back();
    RETURN_IF_ERROR(port.ReadString("name", &out.name));
    RETURN_IF_ERROR(port.ReadEnum("protocol", kProtocols, &out.protocol));
    if (std::optional<Field> number = port.Get("port")) {
      ASSIGN_OR_RETURN(out.port, number->Int(1, 65535));
    }
    return port.ReadString("appProtocol", &out.app_protocol);
  });
}

}  // namespace

absl::StatusOr<EndpointSlicePtr> DecodeEndpointSliceObject(const ObjectField& object,
                                                           std::string_view implied_api_version,
                                                           const AddressPolicy& policy) {
  RETURN_IF_ERROR(CheckApiVersion(object, "discovery.k8s.io/v1", implied_api_version));
  auto slice = std::make_shared<EndpointSlice>();
  RETURN_IF_ERROR(DecodeObjectMeta(object, &slice->meta));
  if (auto label = slice->meta.labels.find(kServiceNameLabel); label != slice->meta.labels.end()) {
    slice->service_name = label->second;
  }
  ASSIGN_OR_RETURN(Field address_type, object.Require("addressType"));
  ASSIGN_OR_RETURN(slice->address_type, ParseEnum(address_type, kAddressTypes));
  RETURN_IF_ERROR(DecodeEndpoints(object, *slice, RefusedRanges(policy, AddressField::kEndpoint)));
  RETURN_IF_ERROR(DecodeEndpointPorts(object, slice->ports));
  return EndpointSlicePtr(std::move(slice));
}

}  // namespace sluice::config
