// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "lib/base/metrics.h"

namespace sluice::proxy {

// The data path's metrics, resolved once so workers bump atomics without lookups.
// Thread-safe.
struct DataPathMetrics {
  explicit DataPathMetrics(base::Registry& r);

  base::Counter& connections_total;            // accepted TCP connections
  base::Gauge& connections_active;             // accepted and not yet closed (dialling included)
  base::Family<base::Counter>& closed;         // {path, reason}: path sockmap|splice|copy
  base::Counter& connections_failed;           // no endpoint answered within the dial budget
  base::Counter& connections_shed;             // refused at accept: out of file descriptors
  base::Counter& connections_limited;          // refused at accept: the worker's limit
  base::Counter& connections_source_limited;   // refused at accept: the client IP's limit
  base::Family<base::Counter>& dial_failures;  // {reason}, per failed attempt
  base::Family<base::Counter>& bytes;          // {direction}, counted when a connection closes
  base::Counter& bytes_to_backend;
  base::Counter& bytes_to_client;
  base::Family<base::Counter>& path_connections;   // {path}, at close
  base::Family<base::Counter>& path_bytes;         // {path, direction}, at close
  base::Family<base::Counter>& sockmap_fallbacks;  // {reason}, at close: enrolment refused
  base::Gauge& sockmap_paused;                     // kernel directions paused by flow control
  base::Counter& sockmap_pauses;
  base::Counter& sockmap_repeated;  // at close
  base::Gauge& udp_flows;
  base::Counter& udp_flows_total;
  base::Counter& udp_flows_evicted;  // closed (least recently used) to make room for a new one
  base::Family<base::Counter>& udp_datagrams;  // {direction}
  base::Counter& udp_datagrams_to_backend;
  base::Counter& udp_datagrams_to_client;
  base::Family<base::Counter>& udp_dropped;  // {reason}
  base::Gauge& listeners;                    // open listening sockets
  base::Counter& listener_failures;          // listeners that failed to open (retried)
  // {service}: TCP connections reset and UDP datagrams dropped for loadBalancerSourceRanges.
  base::Family<base::Counter>& source_range_refused;
  base::Family<base::Gauge>& unserved_ports;  // {reason}: service ports no path serves
};

}  // namespace sluice::proxy
