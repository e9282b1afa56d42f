// SPDX-License-Identifier: Apache-2.0
// Parts shared by the per-kind decoders: apiVersion, metadata, IP lists.
#include "agent/control/config/decode_objects.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

namespace sluice::config {

using base::Absl;

constexpr char kDefaultNamespace[] = "default";

absl::Status CheckApiVersion(const ObjectField& object, std::string_view want,
                             std::string_view implied) {
  std::string_view version = implied;
  if (std::optional<Field> field = object.Get("apiVersion")) {
    ASSIGN_OR_RETURN(version, field->String());
  }
  if (version == want) {
    return absl::OkStatus();
  }
  if (version.empty()) {
    return object.Error("apiVersion", absl::StrCat("required (\"", Absl(want), "\")"));
  }
  return object.Error("apiVersion",
                      absl::StrCat("must be \"", Absl(want), "\", got \"", Absl(version), "\""));
}

absl::Status DecodeObjectMeta(const ObjectField& object, ObjectMeta* meta) {
  ASSIGN_OR_RETURN(std::optional<ObjectField> metadata, object.GetObject("metadata"));
  if (!metadata) {
    return object.Error("metadata", "required");
  }
  ASSIGN_OR_RETURN(Field name, metadata->Require("name"));
  ASSIGN_OR_RETURN(std::string_view name_text, name.String());
  if (name_text.empty()) {
    return name.Error("required");
  }
  meta->id.name.assign(name_text);
  RETURN_IF_ERROR(metadata->ReadString("namespace", &meta->id.ns));
  if (meta->id.ns.empty()) {
    meta->id.ns = kDefaultNamespace;
  }
  RETURN_IF_ERROR(metadata->ReadString("uid", &meta->uid));
  RETURN_IF_ERROR(metadata->ReadString("resourceVersion", &meta->resource_version));
  RETURN_IF_ERROR(metadata->ReadStringMap("labels", &meta->labels));
  return metadata->ReadStringMap("annotations", &meta->annotations);
}

std::optional<NamespacedName> ReadObjectId(const simdjson::dom::element& object) {
  simdjson::dom::element metadata;
  std::string_view name;
  if (object["metadata"].get(metadata) != simdjson::SUCCESS ||
      metadata["name"].get(name) != simdjson::SUCCESS || name.empty()) {
    return std::nullopt;
  }
  std::string_view ns;
  simdjson::dom::element ns_value;
  if (metadata["namespace"].get(ns_value) == simdjson::SUCCESS && !ns_value.is_null() &&
      ns_value.get(ns) != simdjson::SUCCESS) {
    return std::nullopt;  // a namespace we cannot read must not name some other object
  }
  return NamespacedName{ns.empty() ? kDefaultNamespace : std::string(ns), std::string(name)};
}

absl::Status AppendIp(const Field& at, std::string_view text, std::vector<net::IpAddress>* out,
                      unsigned refused) {
  std::optional<net::IpAddress> ip = net::IpAddress::Parse(text);
  if (!ip) {
    return at.Error(absl::StrCat("must be a valid IP address, got \"", Absl(text), "\""));
  }
  RETURN_IF_ERROR(CheckSpecialIp(at, text, *ip, refused));
  out->push_back(*ip);
  return absl::OkStatus();
}

namespace {

// Go's net.IP predicates, which ValidateNonSpecialIP uses; an IPv4-mapped IPv6 address is
// already folded into IPv4 by IpAddress::Parse, as Go's To4() does.
unsigned RangesOf(const net::IpAddress& ip) {
  const uint8_t* b = ip.bytes();
  unsigned ranges = kNoSpecialRanges;
  if (ip.IsUnspecified()) {
    ranges |= kUnspecified;
  }
  if (ip.IsLoopback()) {
    ranges |= kLoopback;
  }
  if (ip.is_v4()) {
    if (b[0] == 169 && b[1] == 254) {
      ranges |= kLinkLocal;
    }
    if (b[0] >= 224 && b[0] <= 239) {
      ranges |= kMulticast;
    }
    if (b[0] == 224 && b[1] == 0 && b[2] == 0) {
      ranges |= kLinkLocalMulticast;
    }
    return ranges;
  }
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) {
    ranges |= kLinkLocal;
  }
  if (b[0] == 0xff) {
    ranges |= kMulticast;
    if ((b[1] & 0x0f) == 0x02) {  // scope 2 whatever the flags, as Go's IsLinkLocalMulticast
      ranges |= kLinkLocalMulticast;
    }
  }
  return ranges;
}

}  // namespace

unsigned RefusedRanges(const AddressPolicy& policy, AddressField field) {
  unsigned refused = kApiServerSpecial;
  if (policy.api_validated &&
      (field == AddressField::kClusterIp || field == AddressField::kIngressIp)) {
    refused = kNoSpecialRanges;
  } else if (!policy.api_validated) {
    refused |= kMulticast;
  }
  if ((field == AddressField::kEndpoint || field == AddressField::kClusterIp) &&
      policy.allow_loopback) {
    refused &= ~static_cast<unsigned>(kLoopback);
  }
  return refused;
}

absl::Status CheckSpecialIp(const Field& at, std::string_view text, const net::IpAddress& ip,
                            unsigned refused) {
  const unsigned hit = RangesOf(ip) & refused;
  if (hit == kNoSpecialRanges) {
    return absl::OkStatus();
  }
  // Most specific first: 224.0.0.1 is reported as link-local multicast, not as multicast.
  std::string_view what = "may not be multicast (224.0.0.0/4, ff00::/8)";
  if (hit & kUnspecified) {
    what = "may not be unspecified";
  } else if (hit & kLoopback) {
    what = "may not be in the loopback range (127.0.0.0/8, ::1/128)";
  } else if (hit & kLinkLocal) {
    what = "may not be in the link-local range (169.254.0.0/16, fe80::/10)";
  } else if (hit & kLinkLocalMulticast) {
    what = "may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)";
  }
  return at.Error(absl::StrCat(Absl(what), ", got \"", Absl(text), "\""));
}

}  // namespace sluice::config
