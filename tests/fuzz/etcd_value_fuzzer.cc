// SPDX-License-Identifier: Apache-2.0
// Trust boundary: keys and values read from etcd (--source=etcd), which anyone with write
// access to the prefix controls. Input: the key, a newline, the value; decoded as EtcdSource
// does, under the default prefix.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "agent/control/sources/etcd_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sluice::sources::RegistryKey;
  static const sluice::sources::RegistryLayout layout("/sluice/registry");
  static sluice::sources::RegistryDecoder decoder;  // reused, as EtcdSource reuses its own
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) {
    return 0;
  }
  absl::StatusOr<std::optional<RegistryKey>> key = layout.Parse(input.substr(0, newline));
  if (!key.ok() || !key->has_value()) {
    return 0;
  }
  const std::string_view value = input.substr(newline + 1);
  if ((*key)->kind == RegistryKey::Kind::kService) {
    (void)decoder.Service((*key)->id, value);
  } else {
    (void)decoder.EndpointSlice((*key)->id, value);
  }
  return 0;
}
