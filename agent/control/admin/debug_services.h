// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/control/proxier/service_table.h"
#include "agent/dataplane/proxy/worker.h"

namespace sluice::admin {

// What the data paths do with each service port, by service port name ("namespace/name:port").
struct PortStates {
  std::map<std::string, std::vector<std::string>> listeners;  // the proxy's: ["tcp/IP:PORT", ...]
  std::map<std::string, std::vector<std::string>> socket_lb;  // frontends balanced at the socket
  // Frontends whose remote clients are translated by the eBPF NAT on the node's devices.
  std::map<std::string, std::vector<std::string>> external_bpf;
  std::map<std::string, std::string> unserved;  // why no path serves the port
};

// /debug/services: the programmed table as JSON, one object per service port, sorted, with
// what each path does with it.
std::string RenderDebugServices(const proxier::ServiceTable& table, const PortStates& states);

// /debug/connections: every open TCP connection with the data path and per-direction state it
// uses, as JSON.
std::string RenderDebugConnections(const std::vector<proxy::ConnectionInfo>& connections);

}  // namespace sluice::admin
