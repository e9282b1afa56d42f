// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::base {

// Reads a whole file of at most `max_bytes` (a bigger one is ResourceExhausted, read no
// further). Errors read "read <path>: <cause>".
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

// Raises the soft open-file limit to the hard one (as Go programs do at start): every proxied
// or tunnelled connection holds descriptors, and the usual soft limit of 1024 would cap a
// proxy at a few hundred connections. Logs the change or why it failed.
void RaiseFileLimit();

}  // namespace sluice::base
