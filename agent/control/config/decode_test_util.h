// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/strings.h"
#include "lib/net/address.h"

#include "agent/control/config/decode.h"

// Helpers shared by the decoder tests.

namespace sluice::config::testing {

inline net::IpAddress Ip(std::string_view text) {
  std::optional<net::IpAddress> ip = net::IpAddress::Parse(text);
  EXPECT_TRUE(ip.has_value()) << text;
  return ip.value_or(net::IpAddress());
}

// The manifest `text` decodes to, failing the test on a syntax error.
inline Manifest Decode(std::string_view text, Format format = Format::kAuto,
                       const AddressPolicy& policy = {}) {
  absl::StatusOr<Manifest> manifest = DecodeManifest(text, format, policy);
  EXPECT_TRUE(manifest.ok()) << manifest.status() << "\n" << text;
  return manifest.ok() ? *std::move(manifest) : Manifest();
}

// The one Service in `text`, which must decode without errors.
inline Service OneService(std::string_view text) {
  Manifest m = Decode(text);
  EXPECT_TRUE(m.errors.empty()) << (m.errors.empty() ? "" : m.errors[0].ToString());
  EXPECT_EQ(m.services.size(), 1u) << text;
  return m.services.empty() ? Service() : *m.services[0];
}

inline EndpointSlice OneSlice(std::string_view text) {
  Manifest m = Decode(text);
  EXPECT_TRUE(m.errors.empty()) << (m.errors.empty() ? "" : m.errors[0].ToString());
  EXPECT_EQ(m.endpoint_slices.size(), 1u) << text;
  return m.endpoint_slices.empty() ? EndpointSlice() : *m.endpoint_slices[0];
}

// The one DecodeError of `text`, which must hold exactly one object, and that one bad.
inline DecodeError OneError(std::string_view text) {
  Manifest m = Decode(text);
  EXPECT_TRUE(m.services.empty() && m.endpoint_slices.empty()) << text;
  EXPECT_EQ(m.errors.size(), 1u) << text;
  return m.errors.empty() ? DecodeError() : m.errors[0];
}

// "<path>: <message>" of the one error, for compact table-driven checks.
inline std::string ErrorOf(std::string_view text) {
  DecodeError e = OneError(text);
  return absl::StrCat(e.path, ": ", e.message);
}

}  // namespace sluice::config::testing
