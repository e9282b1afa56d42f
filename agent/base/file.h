// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::base {

// Reads a whole file of at most `max_bytes` (a bigger one is ResourceExhausted, read no
// further). Errors read "read <path>: <cause>".
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

}  // namespace sluice::base
