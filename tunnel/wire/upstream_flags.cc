// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/upstream_flags.h"

#include "lib/base/log.h"

namespace sluice::tunnel::wire {

std::vector<base::Option> UpstreamCommonOptions(UpstreamCommonFlags& c) {
  constexpr base::Option::Origin kUpstream = base::Option::Origin::kUpstream;
  return {
      {"enable-profiling", &c.enable_profiling, "Accepted for compatibility; no effect.", kUpstream,
       "", "sluice serves no pprof endpoints"},
      {"enable-contention-profiling", &c.enable_contention_profiling,
       "Accepted for compatibility (needs --enable-profiling, as upstream); no effect.", kUpstream,
       "", "sluice serves no pprof endpoints"},
      {"xfr-channel-size", &c.xfr_channel_size,
       "Accepted for compatibility; sluice bounds queues in bytes instead.", kUpstream, "",
       "sluice bounds queues in bytes (--max-connection-buffer)"},
      {"warn-on-channel-limit", &c.warn_on_channel_limit,
       "Deprecated upstream; accepted, no effect.", kUpstream, "",
       "sluice has no channels to warn about"},
  };
}

absl::Status ValidateUpstreamCommon(const UpstreamCommonFlags& c) {
  if (c.enable_contention_profiling && !c.enable_profiling) {
    return absl::InvalidArgumentError(
        "--enable-contention-profiling=true needs --enable-profiling=true (as upstream)");
  }
  return absl::OkStatus();
}

void WarnIgnoredFlags(const base::FlagSet& flags, std::span<const base::Option> table) {
  for (base::Option::Origin origin :
       {base::Option::Origin::kKlog, base::Option::Origin::kUpstream}) {
    for (const std::string& line : base::Unapplied(flags, table, origin, "upstream Konnectivity")) {
      LOG(WARNING) << line;
    }
  }
}

}  // namespace sluice::tunnel::wire
