// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/etcd_registry.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"
#include "simdjson.h"

#include "agent/control/config/decode.h"

namespace sluice::sources {

namespace {

using base::Absl;

constexpr std::string_view kServices = "services";
constexpr std::string_view kEndpointSlices = "endpointslices";

// Reads metadata.namespace when it is a non-empty string.
std::string_view DeclaredNamespace(const simdjson::dom::element& object) {
  std::string_view ns;
  if (object["metadata"]["namespace"].get(ns) != simdjson::SUCCESS) {
    return {};
  }
  return ns;
}

// The decoder's messages start with the object as its metadata names it ("Service default/web: "
// when the namespace is left out); the caller names it by its key instead.
absl::Status WithoutObjectName(const absl::Status& status, std::string_view kind) {
  const std::string_view message = base::Std(status.message());
  const size_t colon = message.find(": ");
  if (message.substr(0, kind.size()) != kind || colon == std::string_view::npos) {
    return status;
  }
  return absl::Status(status.code(), Absl(message.substr(colon + 2)));
}

// Decodes one value with `decode` and reconciles its identity with the key's.
template <typename T, typename Decode>
absl::StatusOr<std::shared_ptr<const T>> DecodeValue(simdjson::dom::parser& parser,
                                                     const config::NamespacedName& id,
                                                     std::string_view value, std::string_view kind,
                                                     Decode decode) {
  simdjson::dom::element root;
  // The value is not padded for simdjson, so the parser copies it into its own buffer.
  if (auto error = parser.parse(value.data(), value.size(), true).get(root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("value is not JSON: ", simdjson::error_message(error)));
  }
  absl::StatusOr<std::shared_ptr<const T>> object = decode(root);
  if (!object.ok()) {
    return WithoutObjectName(object.status(), kind);
  }
  const config::NamespacedName& got = (*object)->meta.id;
  if (got.name != id.name) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata.name is \"", got.name, "\" but the key names \"", id.name, "\""));
  }
  const std::string_view declared = DeclaredNamespace(root);
  if (!declared.empty() && declared != id.ns) {
    return absl::InvalidArgumentError(absl::StrCat("metadata.namespace is \"", Absl(declared),
                                                   "\" but the key names \"", id.ns, "\""));
  }
  if (got.ns == id.ns) {
    return object;
  }
  // No namespace in the value: the decoder put it in "default"; the key says where it lives.
  auto copy = std::make_shared<T>(**object);
  copy->meta.id.ns = id.ns;
  return std::shared_ptr<const T>(std::move(copy));
}

}  // namespace

RegistryLayout::RegistryLayout(std::string_view prefix) : prefix_(prefix) {
  while (!prefix_.empty() && prefix_.back() == '/') {
    prefix_.pop_back();
  }
}

std::string RegistryLayout::RangeEnd() const {
  std::string end = RangeStart();  // ends in '/', so incrementing the last byte cannot overflow
  ++end.back();
  return end;
}

std::string RegistryLayout::Key(RegistryKey::Kind kind, const config::NamespacedName& id) const {
  return absl::StrCat(prefix_, "/",
                      Absl(kind == RegistryKey::Kind::kService ? kServices : kEndpointSlices), "/",
                      id.ns, "/", id.name);
}

absl::StatusOr<std::optional<RegistryKey>> RegistryLayout::Parse(std::string_view key) const {
  // PREFIX/ without building RangeStart(): this runs for every key read and every watch event.
  if (key.size() <= prefix_.size() || key.substr(0, prefix_.size()) != prefix_ ||
      key[prefix_.size()] != '/') {
    return std::optional<RegistryKey>();
  }
  std::string_view rest = key.substr(prefix_.size() + 1);
  const size_t slash = rest.find('/');
  const std::string_view resource = rest.substr(0, slash);
  RegistryKey out;
  if (resource == kServices) {
    out.kind = RegistryKey::Kind::kService;
  } else if (resource == kEndpointSlices) {
    out.kind = RegistryKey::Kind::kEndpointSlice;
  } else {
    return std::optional<RegistryKey>();
  }
  std::string_view id = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  const size_t sep = id.find('/');
  if (sep == std::string_view::npos || sep == 0 || sep + 1 == id.size() ||
      id.find('/', sep + 1) != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("key does not have the form ", prefix_, "/",
                                                   Absl(resource), "/NAMESPACE/NAME"));
  }
  out.id.ns.assign(id.substr(0, sep));
  out.id.name.assign(id.substr(sep + 1));
  return std::optional<RegistryKey>(std::move(out));
}

RegistryDecoder::RegistryDecoder(const config::AddressPolicy& policy)
    : parser_(std::make_unique<simdjson::dom::parser>()), policy_(policy) {}
RegistryDecoder::~RegistryDecoder() = default;

absl::StatusOr<config::ServicePtr> RegistryDecoder::Service(const config::NamespacedName& id,
                                                            std::string_view value) {
  return DecodeValue<config::Service>(
      *parser_, id, value, "Service",
      [this](const simdjson::dom::element& e) { return config::DecodeService(e, policy_); });
}

absl::StatusOr<config::EndpointSlicePtr> RegistryDecoder::EndpointSlice(
    const config::NamespacedName& id, std::string_view value) {
  return DecodeValue<config::EndpointSlice>(
      *parser_, id, value, "EndpointSlice",
      [this](const simdjson::dom::element& e) { return config::DecodeEndpointSlice(e, policy_); });
}

}  // namespace sluice::sources
