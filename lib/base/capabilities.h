// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace sluice::base {

// A capability number (linux/capability.h) and its name for messages.
using Capability = std::pair<int, std::string>;

// OK when this process has every one of `caps` in its effective set; CAP_SYS_ADMIN stands in
// for each, as it does for the BPF ones (kernel/bpf/syscall.c, bpf_token_capable). Otherwise
// PermissionDenied naming what is missing. Thread-safe.
absl::Status RequireCapabilities(const std::vector<Capability>& caps);

}  // namespace sluice::base
