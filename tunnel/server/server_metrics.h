// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "lib/base/metrics.h"

namespace sluice::tunnel::server {

// The server's Prometheus metrics: upstream proxy-server's (so existing dashboards keep
// working), plus sluice's own under sluice_tunnel_server_. Thread-safe.
struct ServerMetrics {
  explicit ServerMetrics(base::Registry& r);

  // A gRPC stream ended in an error: upstream counts it with the code's Go name ("Canceled",
  // "Unavailable") and the packet being written ("Unknown" for a failed read).
  void StreamError(const char* segment, int grpc_code, const std::string& packet_type = "Unknown");

  base::Gauge& ready_backends;
  base::Gauge& established;
  base::Gauge& pending_dials;
  base::Family<base::Counter>& dial_failures;   // {reason}, upstream's reasons
  base::Family<base::Gauge>& grpc_connections;  // {service_method}: Proxy | Connect
  base::Gauge& http_connections;
  base::Histogram& dial_duration;               // successful dials only, as upstream
  base::Histogram& frontend_write_duration;     // one write of a packet to a frontend
  base::Family<base::Counter>& packets;         // {segment, packet_type}
  base::Family<base::Counter>& stream_errors;   // {segment, code, packet_type}
  base::Counter& culled_leases;                 // expired Leases deleted (LeaseController)
  base::Family<base::Counter>& bad_packets;     // {reason}, sluice extension
  base::Counter& overflow_closes;               // sluice extension
  base::Counter& stall_closes;                  // sluice extension (--stall-timeout)
  base::Family<base::Counter>& limited;         // {limit}, sluice extension
  base::Family<base::Counter>& agent_refusals;  // {reason}, sluice extension
  base::Family<base::Counter>& token_reviews;   // {outcome}, sluice extension
};

}  // namespace sluice::tunnel::server
