// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/time/time.h"

namespace sluice::admin {

// The inputs of kube-proxy's proxy health check, read at request time.
struct HealthInputs {
  absl::Time now;
  absl::Time started;         // process start: the base of Go's monotonic "m=+" reading
  absl::Time last_updated;    // last successful sync; InfinitePast before the first
  absl::Time oldest_pending;  // oldest change not yet applied; InfiniteFuture when none
  bool sources_synced = false;
  absl::Duration timeout;  // 2 x --sync-period, as kube-proxy
  // KEP-3836: false while this node's Node is being deleted or tainted
  // ToBeDeletedByClusterAutoscaler. Only /healthz reads it.
  bool node_eligible = true;
  absl::TimeZone zone;  // Go's time.Local: the agent passes absl::LocalTimeZone()
};

struct HealthReport {
  bool healthy = false;
  std::string body;
};

// The proxy's own health, without the node's eligibility (kube-proxy's IsHealthy(), which the
// service health check servers report as serviceProxyHealthy): false until every source has
// synced and the first sync applied, and whenever a queued change has waited longer than the
// timeout.
bool ProxierHealthy(const HealthInputs& in);
// /healthz: ProxierHealthy and the node eligible. The body is kube-proxy 1.31's,
// {"lastUpdated": "<t>","currentTime": "<t>", "nodeEligible": <bool>} (its spacing), and
// lastUpdated is currentTime while healthy.
HealthReport Healthz(const HealthInputs& in);
// /livez: only the stuck-update rule (counting a never-finished first sync from start), so a
// slow initial list does not get the agent restarted by its liveness probe; the node's
// eligibility does not count. Body {"lastUpdated": "<t>","currentTime": "<t>"}.
HealthReport Livez(const HealthInputs& in);

// `t` as Go's time.Time.String() prints a time.Now() reading, which kube-proxy's %q shows:
// "2006-01-02 15:04:05.999999999 -0700 MST m=+<seconds since `started`, 9 decimals>".
// InfinitePast is Go's zero time, "0001-01-01 00:00:00 +0000 UTC" (no monotonic reading).
std::string GoTimeString(absl::Time t, absl::Time started, absl::TimeZone zone);

}  // namespace sluice::admin
