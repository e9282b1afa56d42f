// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/server_metrics.h"

#include "tunnel/wire/packet.h"

namespace sluice::tunnel::server {
namespace {
// Buckets of upstream's dial and frontend-write histograms.
const std::vector<double> kLatencyBuckets = {0.000001, 0.00001, 0.0001, 0.005, 0.025,
                                             0.1,      0.5,     2.5,    12.5};
// Names, HELP texts, labels and buckets are upstream proxy-server's (v0.31,
// pkg/server/metrics), so dashboards and alerts written for it keep working; the list is
// checked against tests/integration/tunnel/upstream_metrics_v0.31.txt.
std::string N(const char* s) { return std::string("konnectivity_network_proxy_server_") + s; }
// sluice's own metrics stay out of upstream's namespace.
std::string S(const char* s) { return std::string("sluice_tunnel_server_") + s; }
}  // namespace

ServerMetrics::ServerMetrics(base::Registry& r)
    : ready_backends(r.AddGauge(N("ready_backend_connections"),
                                "Number of konnectivity agent connected to the proxy server")
                         .Get()),
      established(r.AddGauge(N("established_connections"),
                             "Current number of established end-to-end connections (post-dial).")
                      .Get()),
      pending_dials(
          r.AddGauge(N("pending_backend_dials"), "Current number of pending backend dial requests")
              .Get()),
      dial_failures(r.AddCounter(N("dial_failure_count"),
                                 "Number of dial failures observed. Multiple failures can occur "
                                 "for a single dial request.",
                                 {"reason"})),
      grpc_connections(r.AddGauge(N("grpc_connections"),
                                  "Number of current grpc connections, partitioned by service "
                                  "method.",
                                  {"service_method"})),
      http_connections(
          r.AddGauge(N("http_connections"), "Number of current HTTP CONNECT connections").Get()),
      dial_duration(r.AddHistogram(N("dial_duration_seconds"),
                                   "Latency of dial to the remote endpoint in seconds",
                                   kLatencyBuckets)
                        .Get()),
      frontend_write_duration(r.AddHistogram(N("frontend_write_duration_seconds"),
                                             "Latency of write to the frontend in seconds",
                                             kLatencyBuckets)
                                  .Get()),
      packets(wire::AddStreamPackets(r, N(""))),
      stream_errors(wire::AddStreamErrors(r, N(""))),
      culled_leases(r.AddCounter(N("culled_leases_count"),
                                 "Count of expired leases that the lease garbage collection "
                                 "controller has culled.")
                        .Get()),
      bad_packets(r.AddCounter(S("bad_packets_total"),
                               "Packets dropped as malformed or unexpected, by reason.",
                               {"reason"})),
      overflow_closes(r.AddCounter(S("overflow_closes_total"),
                                   "Tunnelled connections closed because their client did not "
                                   "read its bounded queue.")
                          .Get()),
      stall_closes(r.AddCounter(S("stall_closes_total"),
                                "Tunnelled connections closed because their client read nothing "
                                "for --stall-timeout (agents without the window extension only).")
                       .Get()),
      limited(r.AddCounter(S("limited_total"),
                           "Requests refused (or, for byte_budget, paused) at a configured "
                           "limit, by limit: pending_dials_per_client, tunnels_per_client, "
                           "tunnels_per_agent, agents, header_bytes, header_timeout, "
                           "byte_budget.",
                           {"limit"})),
      agent_refusals(r.AddCounter(S("agent_refusals_total"),
                                  "Agent streams refused after authentication, by reason: "
                                  "node_binding (identity not that of the token's node).",
                                  {"reason"})),
      token_reviews(r.AddCounter(S("token_reviews_total"),
                                 "Agent tokens checked, by outcome: no_token, precheck_refused, "
                                 "cache_accepted, cache_refused, peer_limit, queue_full, "
                                 "accepted, refused, unavailable.",
                                 {"outcome"})) {}

void ServerMetrics::StreamError(const char* segment, int grpc_code,
                                const std::string& packet_type) {
  stream_errors.WithLabels({segment, wire::GrpcCodeName(grpc_code), packet_type}).Inc();
}

}  // namespace sluice::tunnel::server
