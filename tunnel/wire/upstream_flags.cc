// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/upstream_flags.h"

namespace sluice::tunnel::wire {

void WarnIgnoredFlags(const base::FlagSet& flags, std::span<const base::IgnoredFlag> own) {
  // Those not registered by one binary are never Changed there.
  static constexpr base::IgnoredFlag kIgnoredByBoth[] = {
      {"enable-profiling", "sluice serves no pprof endpoints"},
      {"enable-contention-profiling", "sluice serves no pprof endpoints"},
      {"xfr-channel-size", "sluice bounds queues in bytes (--max-connection-buffer)"},
      {"warn-on-channel-limit", "sluice has no channels to warn about"},
  };
  base::WarnIgnoredFlags(flags, "upstream Konnectivity", own, kIgnoredByBoth);
}

}  // namespace sluice::tunnel::wire
