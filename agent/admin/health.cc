// SPDX-License-Identifier: Apache-2.0
#include "agent/admin/health.h"

#include "absl/strings/str_cat.h"

namespace sluice::admin {

namespace {

std::string Format(absl::Time t) {
  if (t == absl::InfinitePast()) {
    return "";
  }
  return absl::FormatTime(absl::RFC3339_full, t, absl::UTCTimeZone());
}

bool Stuck(const HealthInputs& in) {
  absl::Time waiting_since = in.oldest_pending;
  if (in.last_updated == absl::InfinitePast()) {
    waiting_since = std::min(waiting_since, in.started);
  }
  return waiting_since != absl::InfiniteFuture() && in.now - waiting_since > in.timeout;
}

HealthReport Report(bool healthy, const HealthInputs& in) {
  return {healthy, absl::StrCat("{\"lastUpdated\": \"", Format(in.last_updated),
                                "\", \"currentTime\": \"", Format(in.now), "\"}")};
}

}  // namespace

HealthReport Healthz(const HealthInputs& in) {
  bool ready = in.sources_synced && in.last_updated != absl::InfinitePast();
  return Report(ready && !Stuck(in), in);
}

HealthReport Livez(const HealthInputs& in) { return Report(!Stuck(in), in); }

}  // namespace sluice::admin
