// SPDX-License-Identifier: Apache-2.0
// Parts shared by the per-kind decoders: apiVersion, metadata, IP lists.
#include "agent/config/decode_objects.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "agent/base/status.h"
#include "agent/base/strings.h"

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

absl::Status AppendIp(const Field& at, std::string_view text, std::vector<net::IpAddress>* out) {
  std::optional<net::IpAddress> ip = net::IpAddress::Parse(text);
  if (!ip) {
    return at.Error(absl::StrCat("must be a valid IP address, got \"", Absl(text), "\""));
  }
  out->push_back(*ip);
  return absl::OkStatus();
}

}  // namespace sluice::config
