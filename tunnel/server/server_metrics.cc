// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/server_metrics.h"

namespace sluice::server {
namespace {
constexpr char kP[] = "konnectivity_network_proxy_server_";
std::string N(const char* s) { return std::string(kP) + s; }
}  // namespace

ServerMetrics::ServerMetrics(base::Registry& r)
    : ready_backends(
          r.AddGauge(N("ready_backend_connections"), "Number of connected agents (backends).")
              .Get()),
      established(
          r.AddGauge(N("established_connections"), "Current established tunnel connections.")
              .Get()),
      pending_dials(
          r.AddGauge(N("pending_backend_dials"), "Current pending dials to backends.").Get()),
      dial_failures(r.AddCounter(N("dial_failure_count"), "Number of dial failures.", {"reason"})),
      grpc_connections(
          r.AddGauge(N("grpc_connections"), "Open gRPC streams by method.", {"service_method"})),
      http_connections(
          r.AddGauge(N("http_connections"), "Open HTTP CONNECT frontend connections.").Get()),
      dial_duration(r.AddHistogram(N("dial_duration_seconds"),
                                   "Latency of dial requests from frontends to agents.",
                                   {0.005, 0.025, 0.1, 0.5, 2.5, 12.5})
                        .Get()),
      packets(r.AddCounter(N("stream_packets_total"), "Packets received and sent by stream.",
                           {"segment", "packet_type"})),
      bad_packets(r.AddCounter(N("bad_packets_total"),
                               "Packets dropped as malformed or unexpected (sluice).", {"reason"})),
      overflow_closes(r.AddCounter(N("overflow_closes_total"),
                                   "Connections closed because a frontend's bounded queue "
                                   "overflowed (sluice).")
                          .Get()) {}

}  // namespace sluice::server
