// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "lib/base/metrics.h"

namespace sluice::sources {

// The metric families every source reports into, labelled by source name. Registered once.
// Thread-safe.
struct SourceMetricFamilies {
  explicit SourceMetricFamilies(base::Registry& registry);
  base::Family<base::Counter>& updates;
  base::Family<base::Counter>& errors;
  base::Family<base::Counter>& decode_errors;
  base::Family<base::Counter>& reloads;
  base::Family<base::Counter>& relists;  // full re-reads after the first (410, compaction)
  base::Family<base::Gauge>& objects;
  base::Family<base::Gauge>& last_sync;
  base::Family<base::Counter>& events;  // by {source, type}: watch events received
};

// One source's children of those families.
struct SourceMetrics {
  SourceMetrics(SourceMetricFamilies& f, const std::string& source);
  base::Counter& updates;
  base::Family<base::Counter>& errors;  // by {source, reason}: use Error()
  base::Counter& decode_errors;
  base::Counter& reloads_ok;
  base::Counter& reloads_failed;
  base::Counter& relists;
  base::Gauge& services;
  base::Gauge& endpoint_slices;
  base::Gauge& last_sync;
  const std::string source;
  base::Counter& Error(const std::string& reason) { return errors.WithLabels({source, reason}); }
  base::Family<base::Counter>& events;  // by {source, type}: use Event()
  base::Counter& Event(const std::string& type) { return events.WithLabels({source, type}); }
};

}  // namespace sluice::sources
