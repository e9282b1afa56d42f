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
                                                   {"/readyz", o.readyz},
                                                   {"/ready", o.readyz}};
  if (o.metrics_on_health) {
    health.emplace_back("/metrics", metrics);
  }
  StatusPorts s;
  ASSIGN_OR_RETURN(s.health,
                   http::StatusServer::Create(o.health_host, static_cast<int>(o.health_port),
                                              std::move(health)));
  std::function<http::StatusServer::Reply()> admin_metrics = metrics;
  if (o.metrics_on_health && o.admin_redirects_to_health) {
    http::StatusServer::Reply moved;
    moved.redirect_port = s.health->port();  // the bound one, should the flag be 0
    admin_metrics = [moved] { return moved; };
  }
  ASSIGN_OR_RETURN(s.admin, http::StatusServer::Create(o.admin_host, static_cast<int>(o.admin_port),
                                                       {{"/metrics", std::move(admin_metrics)}}));
  return s;
}

}  // namespace sluice::cli
