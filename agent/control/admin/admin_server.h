// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/metrics.h"
#include "lib/http/status_server.h"

#include "agent/control/admin/health.h"

namespace sluice::admin {

// What the endpoints read; every function must be thread-safe (they run on HTTP threads).
struct AdminSources {
  std::function<HealthInputs()> health;
  std::function<std::string()> proxy_mode;
  std::function<std::string()> debug_services;     // JSON
  std::function<std::string()> debug_connections;  // JSON
  // Optional: why the node is not ready beyond /healthz (e.g. the tunnel has no server), or "".
  std::function<std::string()> not_ready;
  base::Registry* metrics = nullptr;
};

// kube-proxy's two HTTP servers: /healthz, /livez (and /readyz) on --healthz-bind-address, and
// /metrics, /proxyMode, /debug/services (and our /debug/connections) on --metrics-bind-address.
// An empty address disables that server. Owns one http::StatusServer per address; handlers only
// read AdminSources.
class AdminServer final {
 public:
  // Binds both addresses now, so a taken or bad address fails at start.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Create(const std::string& healthz_address,
                                                             const std::string& metrics_address,
                                                             AdminSources sources);
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // The ports actually bound (useful with port 0); 0 when disabled.
  int healthz_port() const { return healthz_ ? healthz_->port() : 0; }
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }

 private:
  explicit AdminServer(AdminSources sources);

  // Declared first so the servers, whose handlers read it, are destroyed before it.
  const AdminSources sources_;
  std::unique_ptr<http::StatusServer> healthz_;
  std::unique_ptr<http::StatusServer> metrics_;
};

}  // namespace sluice::admin
