// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "lib/base/metrics.h"

namespace sluice::tunnel::agent {

// The agent's Prometheus metrics: upstream proxy-agent's, plus sluice's own under
// sluice_tunnel_agent_. Thread-safe.
struct AgentMetrics {
  explicit AgentMetrics(base::Registry& r);

  base::Gauge& open_server_connections;
  base::Gauge& known_server_count;
  base::Gauge& open_endpoint_connections;
  base::Family<base::Counter>& dial_failures;  // {reason}: timeout | unknown
  base::Histogram& dial_duration;              // successful dials only, as upstream
  base::Family<base::Counter>& packets;        // {segment, packet_type}: from_agent | to_agent
  base::Family<base::Counter>& stream_errors;  // {segment, code, packet_type}
  base::Family<base::Counter>& bad_packets;    // {reason}, sluice extension
  base::Counter& overflow_closes;              // sluice extension
  base::Counter& stall_closes;                 // sluice extension (--stall-timeout)
  base::Family<base::Counter>& dials_denied;   // {reason}, sluice extension (AllowList)
};

}  // namespace sluice::tunnel::agent
