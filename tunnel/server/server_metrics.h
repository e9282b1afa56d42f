// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "agent/base/metrics.h"

namespace sluice::server {

// The server's Prometheus metrics, named as upstream proxy-server names them so existing
// dashboards keep working. Thread-safe.
struct ServerMetrics {
  explicit ServerMetrics(base::Registry& r);

  base::Gauge& ready_backends;
  base::Gauge& established;
  base::Gauge& pending_dials;
  base::Family<base::Counter>& dial_failures;   // {reason}
  base::Family<base::Gauge>& grpc_connections;  // {service_method}
  base::Gauge& http_connections;
  base::Histogram& dial_duration;
  base::Family<base::Counter>& packets;      // {segment, packet_type}
  base::Family<base::Counter>& bad_packets;  // {reason}, sluice extension
  base::Counter& overflow_closes;            // sluice extension
};

}  // namespace sluice::server
