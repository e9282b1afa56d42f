// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/status_ports.h"

#include <utility>
#include <vector>

#include "lib/base/status.h"

namespace sluice::cli {

absl::StatusOr<StatusPorts> StartStatusPorts(StatusPortsOptions o) {
  const base::Registry* registry = o.registry;
  auto metrics = [registry] { return http::StatusServer::Metrics(*registry); };
  std::vector<http::StatusServer::Route> health = {{"/healthz",
                                                    [] {
                                                      return http::StatusServer::Reply{200, "ok"};
                                                    }},
                                                   {"/readyz", std::move(o.readyz)}};
  if (o.metrics_on_health) {
    health.emplace_back("/metrics", metrics);
  }
  StatusPorts s;
  ASSIGN_OR_RETURN(s.health,
                   http::StatusServer::Create(o.health_host, static_cast<int>(o.health_port),
                                              std::move(health)));
  ASSIGN_OR_RETURN(s.admin, http::StatusServer::Create(o.admin_host, static_cast<int>(o.admin_port),
                                                       {{"/metrics", metrics}}));
  return s;
}

}  // namespace sluice::cli
