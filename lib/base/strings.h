// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace sluice::base {

// Debian 12's abseil is built with its own absl::string_view, distinct from std::string_view;
// convert explicitly at the call into abseil.
inline absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace sluice::base
