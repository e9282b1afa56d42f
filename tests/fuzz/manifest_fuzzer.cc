// SPDX-License-Identifier: Apache-2.0
// Trust boundary: manifest files (--source=file) and anything else handed to DecodeManifest.
// The first byte picks the format, so YAML text reaches the YAML path even when it starts like
// JSON; the rest is the manifest.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/control/config/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sluice::config::Format;
  if (size == 0) {
    return 0;
  }
  static constexpr Format kFormats[] = {Format::kAuto, Format::kJson, Format::kYaml};
  const Format format = kFormats[data[0] % 3];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<sluice::config::Manifest> manifest = sluice::config::DecodeManifest(text, format);
  if (manifest.ok()) {
    for (const sluice::config::DecodeError& error : manifest->errors) {
      (void)error.ToString();
    }
  }
  return 0;
}
