// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/time/time.h"

namespace sluice::admin {

// The inputs of kube-proxy's proxier health check, read at request time.
struct HealthInputs {
  absl::Time now;
  absl::Time started;
  absl::Time last_updated;    // last successful sync; InfinitePast before the first
  absl::Time oldest_pending;  // oldest change not yet applied; InfiniteFuture when none
  bool sources_synced = false;
  absl::Duration timeout;  // 2 x --sync-period, as kube-proxy
};

struct HealthReport {
  bool healthy = false;
  std::string body;  // {"lastUpdated": "...", "currentTime": "..."}
};

// /healthz: unhealthy until every source has synced and the first sync applied, and whenever
// a queued change has waited longer than the timeout.
HealthReport Healthz(const HealthInputs& in);
// /livez: only the stuck-update rule (counting a never-finished first sync from start), so a
// slow initial list does not get the agent restarted by its liveness probe.
HealthReport Livez(const HealthInputs& in);

}  // namespace sluice::admin
