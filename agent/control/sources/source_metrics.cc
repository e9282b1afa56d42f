// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/source_metrics.h"

namespace sluice::sources {

SourceMetricFamilies::SourceMetricFamilies(base::Registry& r)
    : updates(r.AddCounter("sluice_source_updates_total",
                           "Updates a config source pushed into the pipeline", {"source"})),
      errors(r.AddCounter("sluice_source_errors_total",
                          "Errors of a config source (read, watch, connection)",
                          {"source", "reason"})),
      decode_errors(r.AddCounter("sluice_source_decode_errors_total",
                                 "Objects or documents a source rejected as malformed",
                                 {"source"})),
      reloads(r.AddCounter("sluice_source_reloads_total",
                           "File reloads by result (success: applied, error: kept last good)",
                           {"source", "result"})),
      relists(r.AddCounter("sluice_source_relists_total",
                           "Full re-reads of a source's state after its watch lost history "
                           "(etcd compaction, API 410 Gone)",
                           {"source"})),
      objects(r.AddGauge("sluice_source_objects", "Objects a source currently provides",
                         {"source", "kind"})),
      last_sync(r.AddGauge("sluice_source_last_sync_timestamp_seconds",
                           "When a source last delivered its state", {"source"})),
      events(r.AddCounter("sluice_source_events_total", "Watch events a source received, by type",
                          {"source", "type"})) {}

SourceMetrics::SourceMetrics(SourceMetricFamilies& f, const std::string& src)
    : updates(f.updates.WithLabels({src})),
      errors(f.errors),
      decode_errors(f.decode_errors.WithLabels({src})),
      reloads_ok(f.reloads.WithLabels({src, "success"})),
      reloads_failed(f.reloads.WithLabels({src, "error"})),
      relists(f.relists.WithLabels({src})),
      services(f.objects.WithLabels({src, "Service"})),
      endpoint_slices(f.objects.WithLabels({src, "EndpointSlice"})),
      last_sync(f.last_sync.WithLabels({src})),
      source(src),
      events(f.events) {}

}  // namespace sluice::sources
