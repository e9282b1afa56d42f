// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/option_table.h"

namespace sluice::tunnel::wire {

// Upstream Konnectivity flags that both binaries (proxy-server, proxy-agent) have and sluice
// does not act on. Their defaults differ per binary, so each sets them.
struct UpstreamCommonFlags {
  bool enable_profiling = false;
  bool enable_contention_profiling = false;
  int64_t xfr_channel_size = 0;
  bool warn_on_channel_limit = false;
};

// Their rows of both binaries' option tables, pointing into `c`.
std::vector<base::Option> UpstreamCommonOptions(UpstreamCommonFlags& c);

// Both upstream binaries' Validate(): --enable-contention-profiling needs --enable-profiling.
absl::Status ValidateUpstreamCommon(const UpstreamCommonFlags& c);

// One warning per klog or upstream row of `table` that was set to a non-default value and that
// sluice ignores (base::Unapplied).
void WarnIgnoredFlags(const base::FlagSet& flags, std::span<const base::Option> table);

}  // namespace sluice::tunnel::wire
