// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/data_path_metrics.h"

namespace sluice::proxy {

DataPathMetrics::DataPathMetrics(base::Registry& r)
    : connections_total(r.AddCounter("sluice_connections_total", "TCP connections accepted").Get()),
      connections_active(
          r.AddGauge("sluice_connections_active", "TCP connections open (dialling included)")
              .Get()),
      closed(r.AddCounter("sluice_connections_closed_total",
                          "TCP connections closed, by data path and reason", {"path", "reason"})),
      connections_failed(r.AddCounter("sluice_connections_failed_total",
                                      "TCP connections reset because no endpoint could be "
                                      "dialled within the dial budget")
                             .Get()),
      connections_shed(r.AddCounter("sluice_connections_shed_total",
                                    "TCP connections reset at accept for lack of file descriptors")
                           .Get()),
      connections_limited(
          r.AddCounter("sluice_connections_limited_total",
                       "TCP connections reset at accept because their worker already held "
                       "--max-connections-per-worker")
              .Get()),
      connections_source_limited(
          r.AddCounter("sluice_connections_source_limited_total",
                       "TCP connections reset at accept because their client IP already held "
                       "--max-source-connections-per-worker on that worker")
              .Get()),
      dial_failures(r.AddCounter("sluice_dial_failures_total",
                                 "Failed backend dial attempts, by reason", {"reason"})),
      bytes(r.AddCounter("sluice_bytes_total", "Bytes proxied, counted when a connection closes",
                         {"direction"})),
      bytes_to_backend(bytes.WithLabels({"to_backend"})),
      bytes_to_client(bytes.WithLabels({"to_client"})),
      path_connections(r.AddCounter("sluice_datapath_connections_total",
                                    "TCP connections closed, by the data path they used "
                                    "(sockmap once enrolled, else splice or copy)",
                                    {"path"})),
      path_bytes(r.AddCounter("sluice_datapath_bytes_total",
                              "Bytes proxied by the data path that moved them, counted when a "
                              "connection closes (sockmap: redirected in the kernel)",
                              {"path", "direction"})),
      sockmap_fallbacks(r.AddCounter("sluice_sockmap_fallbacks_total",
                                     "Connections served by splice although the node runs the "
                                     "sockmap fast path, by reason",
                                     {"reason"})),
      sockmap_paused(r.AddGauge("sluice_sockmap_paused_directions",
                                "Kernel-pumped directions paused above the high watermark")
                         .Get()),
      sockmap_pauses(r.AddCounter("sluice_sockmap_pauses_total",
                                  "Times a kernel-pumped direction was paused by flow control")
                         .Get()),
      sockmap_repeated(r.AddCounter("sluice_sockmap_repeated_bytes_total",
                                    "Bytes the kernel handed the sockmap program a second time "
                                    "(a retransmission queued whole), cut off before they "
                                    "reached the peer; counted when a connection closes")
                           .Get()),
      udp_flows(r.AddGauge("sluice_udp_flows", "UDP flows open").Get()),
      udp_flows_total(r.AddCounter("sluice_udp_flows_total", "UDP flows created").Get()),
      udp_flows_evicted(r.AddCounter("sluice_udp_flows_evicted_total",
                                     "UDP flows closed before their idle timeout to make room "
                                     "for a new one (the least recently used first)")
                            .Get()),
      udp_datagrams(
          r.AddCounter("sluice_udp_datagrams_total", "UDP datagrams proxied", {"direction"})),
      udp_datagrams_to_backend(udp_datagrams.WithLabels({"to_backend"})),
      udp_datagrams_to_client(udp_datagrams.WithLabels({"to_client"})),
      udp_dropped(
          r.AddCounter("sluice_udp_dropped_total", "UDP datagrams dropped, by reason", {"reason"})),
      listeners(r.AddGauge("sluice_listeners", "Listening sockets of the userspace proxy").Get()),
      listener_failures(r.AddCounter("sluice_listener_failures_total",
                                     "Listeners that failed to open; each is retried at the "
                                     "next sync while the others serve")
                            .Get()),
      source_range_refused(
          r.AddCounter("sluice_source_range_refused_total",
                       "TCP connections reset and new UDP clients' datagrams dropped because "
                       "their source is outside the service's loadBalancerSourceRanges",
                       {"service"})),
      unserved_ports(r.AddGauge("sluice_unserved_service_ports",
                                "Service ports that no data path serves, by reason", {"reason"})) {}

}  // namespace sluice::proxy
