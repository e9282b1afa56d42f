// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/health.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace sluice::admin {

namespace {

bool Stuck(const HealthInputs& in) {
  absl::Time waiting_since = in.oldest_pending;
  if (in.last_updated == absl::InfinitePast()) {
    waiting_since = std::min(waiting_since, in.started);
  }
  return waiting_since != absl::InfiniteFuture() && in.now - waiting_since > in.timeout;
}

// kube-proxy's handlers: lastUpdated is the current time while healthy ("recent", as before
// 1.26), else the last update.
std::string Times(bool healthy, const HealthInputs& in) {
  const std::string now = GoTimeString(in.now, in.started, in.zone);
  const std::string last = healthy ? now : GoTimeString(in.last_updated, in.started, in.zone);
  return absl::StrCat("{\"lastUpdated\": \"", last, "\",\"currentTime\": \"", now, "\"");
}

}  // namespace

std::string GoTimeString(absl::Time t, absl::Time started, absl::TimeZone zone) {
  if (t == absl::InfinitePast()) {
    return "0001-01-01 00:00:00 +0000 UTC";
  }
  // %E*S trims trailing zeros and the dot, as Go's ".999999999".
  std::string s = absl::FormatTime("%Y-%m-%d %H:%M:%E*S %z %Z", t, zone);
  const int64_t mono = absl::ToInt64Nanoseconds(t - started);
  const uint64_t abs = mono < 0 ? -static_cast<uint64_t>(mono) : static_cast<uint64_t>(mono);
  char buf[48];
  std::snprintf(buf, sizeof(buf), " m=%c%" PRIu64 ".%09" PRIu64, mono < 0 ? '-' : '+',
                abs / 1'000'000'000, abs % 1'000'000'000);
  return s + buf;
}

bool ProxierHealthy(const HealthInputs& in) {
  bool ready = in.sources_synced && in.last_updated != absl::InfinitePast();
  return ready && !Stuck(in);
}

HealthReport Healthz(const HealthInputs& in) {
  const bool healthy = ProxierHealthy(in) && in.node_eligible;
  return {healthy, absl::StrCat(Times(healthy, in),
                                ", \"nodeEligible\": ", in.node_eligible ? "true" : "false", "}")};
}

HealthReport Livez(const HealthInputs& in) {
  const bool healthy = !Stuck(in);
  return {healthy, Times(healthy, in) + "}"};
}

}  // namespace sluice::admin
