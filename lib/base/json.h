// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

namespace sluice::base {

// Appends `text` as a JSON string literal (quotes and RFC 8259 escapes) to `out`.
void AppendJsonString(std::string_view text, std::string& out);

inline std::string JsonString(std::string_view text) {
  std::string out;
  AppendJsonString(text, out);
  return out;
}

}  // namespace sluice::base
