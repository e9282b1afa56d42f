// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/agent_metrics.h"

#include <string>

#include "tunnel/wire/packet.h"

namespace sluice::tunnel::agent {
namespace {
// Names, HELP texts, labels and buckets are upstream proxy-agent's (v0.31,
// pkg/agent/metrics), so dashboards and alerts written for it keep working; the list is
// checked against tests/integration/tunnel/upstream_metrics_v0.31.txt.
std::string N(const char* s) { return std::string("konnectivity_network_proxy_agent_") + s; }
// sluice's own metrics stay out of upstream's namespace.
std::string S(const char* s) { return std::string("sluice_tunnel_agent_") + s; }
}  // namespace

AgentMetrics::AgentMetrics(base::Registry& r)
    : open_server_connections(
          r.AddGauge(N("open_server_connections"), "Current number of open server connections.")
              .Get()),
      known_server_count(r.AddGauge(N("known_server_count"),
                                    "Current number of servers agent is trying to connect to.")
                             .Get()),
      open_endpoint_connections(
          r.AddGauge(N("open_endpoint_connections"), "Current number of open endpoint connections.")
              .Get()),
      dial_failures(r.AddCounter(
          N("endpoint_dial_failure_total"),
          "Number of failures dialing the remote endpoint, by reason (example: timeout).",
          {"reason"})),
      dial_duration(r.AddHistogram(N("dial_duration_seconds"),
                                   "Latency of dial to the remote endpoint in seconds",
                                   {0.005, 0.025, 0.1, 0.5, 2.5, 10, 30})
                        .Get()),
      // Upstream's shared stream metrics (konnectivity-client's common metrics), with the
      // agent's segments: from_agent for what it sends, to_agent for what it receives.
      packets(wire::AddStreamPackets(r, N(""))),
      stream_errors(wire::AddStreamErrors(r, N(""))),
      bad_packets(r.AddCounter(S("bad_packets_total"),
                               "Packets dropped as malformed or unexpected, by reason.",
                               {"reason"})),
      overflow_closes(r.AddCounter(S("overflow_closes_total"),
                                   "Tunnelled connections closed because their backend did not "
                                   "read its bounded queue.")
                          .Get()),
      stall_closes(r.AddCounter(S("stall_closes_total"),
                                "Tunnelled connections closed because their backend read nothing "
                                "for --stall-timeout (servers without the window extension only).")
                       .Get()),
      dials_denied(r.AddCounter(S("dials_denied_total"),
                                "Dials refused by --allowed-destinations, by reason: not_listed, "
                                "loopback, link_local, own_port.",
                                {"reason"})) {}

}  // namespace sluice::tunnel::agent
