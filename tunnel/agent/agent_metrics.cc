// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/agent_metrics.h"

#include <string>

namespace sluice::agent {
namespace {
std::string N(const char* s) { return std::string("konnectivity_network_proxy_agent_") + s; }
}  // namespace

AgentMetrics::AgentMetrics(base::Registry& r)
    : open_server_connections(
          r.AddGauge(N("open_server_connections"), "Current open connections to proxy servers.")
              .Get()),
      known_server_count(
          r.AddGauge(N("known_server_count"), "Server count the servers announced.").Get()),
      open_endpoint_connections(r.AddGauge(N("open_endpoint_connections"),
                                           "Current open connections to backend endpoints.")
                                    .Get()),
      dial_failures(r.AddCounter(N("endpoint_dial_failure_total"),
                                 "Failed dials to backend endpoints.", {"reason"})),
      dial_duration(r.AddHistogram(N("dial_duration_seconds"),
                                   "Latency of dials to backend endpoints.",
                                   {0.005, 0.025, 0.1, 0.5, 2.5, 12.5})
                        .Get()),
      bad_packets(r.AddCounter(N("bad_packets_total"),
                               "Packets dropped as malformed or unexpected (sluice).", {"reason"})),
      overflow_closes(r.AddCounter(N("overflow_closes_total"),
                                   "Connections closed because the backend did not read its "
                                   "bounded queue (sluice).")
                          .Get()) {}

}  // namespace sluice::agent
