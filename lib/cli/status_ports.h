// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/metrics.h"
#include "lib/http/status_server.h"

namespace sluice::cli {

// The health and admin ports of the tunnel binaries, as upstream proxy-server and proxy-agent
// serve them: /healthz (always "ok"), /readyz and its deprecated alias /ready on the health port,
// /metrics on the admin port and, where upstream has it there too, on the health port.
struct StatusPortsOptions {
  std::string health_host;
  int64_t health_port = 0;
  std::string admin_host;
  int64_t admin_port = 0;
  // Answers /readyz and /ready; called on the health server's thread (quick and thread-safe).
  std::function<http::StatusServer::Reply()> readyz;
  bool metrics_on_health = false;
  // With metrics_on_health: the admin port's /metrics is a 301 to the health port's (upstream
  // proxy-agent's admin port redirects there).
  bool admin_redirects_to_health = false;
  const base::Registry* registry = nullptr;  // outlives the servers
};

struct StatusPorts {
  std::unique_ptr<http::StatusServer> health;
  std::unique_ptr<http::StatusServer> admin;
};

// Binds both ports (an error names the address) and serves them until destroyed.
absl::StatusOr<StatusPorts> StartStatusPorts(StatusPortsOptions options);

}  // namespace sluice::cli
