// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "agent/control/config/decode.h"
#include "agent/control/config/model.h"

namespace simdjson::dom {
class parser;
}

namespace sluice::sources {

// What an etcd key under the registry prefix names.
struct RegistryKey {
  enum class Kind { kService, kEndpointSlice };
  Kind kind;
  config::NamespacedName id;
};

// The etcd source's key layout: PREFIX/services/NAMESPACE/NAME and
// PREFIX/endpointslices/NAMESPACE/NAME (the resource names kube-apiserver uses under its own
// /registry prefix). Thread-safe (immutable).
class RegistryLayout final {
 public:
  // Trailing slashes of `prefix` are ignored: "/sluice/registry/" is "/sluice/registry".
  explicit RegistryLayout(std::string_view prefix);

  const std::string& prefix() const { return prefix_; }
  // [RangeStart, RangeEnd) holds every key under PREFIX/ (etcd's prefix range: the last byte
  // incremented).
  std::string RangeStart() const { return prefix_ + "/"; }
  std::string RangeEnd() const;
  std::string Key(RegistryKey::Kind kind, const config::NamespacedName& id) const;

  // nullopt for a key of another resource under the prefix (ignored, so the prefix can hold
  // more than sluice reads); InvalidArgument for a services/ or endpointslices/ key that is
  // not KIND/NAMESPACE/NAME.
  absl::StatusOr<std::optional<RegistryKey>> Parse(std::string_view key) const;

 private:
  std::string prefix_;
};

// Decodes etcd values (Kubernetes JSON) into the object model and checks them against their
// key: metadata.name must equal the key's NAME, and metadata.namespace, when set, its
// NAMESPACE (when unset, the key's namespace applies). Reuses one simdjson parser's buffers.
// Thread: one caller at a time.
class RegistryDecoder final {
 public:
  explicit RegistryDecoder(const config::AddressPolicy& policy = {});
  ~RegistryDecoder();
  RegistryDecoder(const RegistryDecoder&) = delete;
  RegistryDecoder& operator=(const RegistryDecoder&) = delete;

  absl::StatusOr<config::ServicePtr> Service(const config::NamespacedName& id,
                                             std::string_view value);
  absl::StatusOr<config::EndpointSlicePtr> EndpointSlice(const config::NamespacedName& id,
                                                         std::string_view value);

 private:
  std::unique_ptr<simdjson::dom::parser> parser_;
  const config::AddressPolicy policy_;
};

}  // namespace sluice::sources
