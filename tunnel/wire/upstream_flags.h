// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <span>

#include "lib/base/flags.h"
#include "lib/base/klog.h"

namespace sluice::tunnel::wire {

// One warning per upstream Konnectivity flag set to a non-default value that sluice ignores:
// `own` (one binary's) and those both binaries ignore (profiling, channel sizes) and klog's.
void WarnIgnoredFlags(const base::FlagSet& flags, std::span<const base::IgnoredFlag> own);

}  // namespace sluice::tunnel::wire
