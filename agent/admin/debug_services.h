// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/proxier/service_table.h"
#include "agent/proxy/worker.h"

namespace sluice::admin {

// /debug/services: the programmed table as JSON, one object per service port, sorted, with the
// data path's open listeners per service port ("namespace/name:port" -> ["tcp/IP:PORT", ...]).
// `listeners` and `socket_lb` (frontends balanced at the socket, "tcp/10.96.0.10:80") are by
// service port name.
std::string RenderDebugServices(const proxier::ServiceTable& table,
                                const std::map<std::string, std::vector<std::string>>& listeners,
                                const std::map<std::string, std::vector<std::string>>& socket_lb);

// /debug/connections: every open TCP connection with the data path and per-direction state it
// uses, as JSON.
std::string RenderDebugConnections(const std::vector<proxy::ConnectionInfo>& connections);

}  // namespace sluice::admin
