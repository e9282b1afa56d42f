// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

#include "agent/admin/health.h"
#include "agent/base/metrics.h"

namespace httplib {
class Server;
}

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
// An empty address disables that server. Owns one listener thread per server; handlers only read
// AdminSources.
class AdminServer final {
 public:
  // Binds both addresses now, so a taken or bad address fails at start.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Create(const std::string& healthz_address,
                                                             const std::string& metrics_address,
                                                             AdminSources sources);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // The ports actually bound (useful with port 0); 0 when disabled.
  int healthz_port() const { return healthz_port_; }
  int metrics_port() const { return metrics_port_; }

 private:
  explicit AdminServer(AdminSources sources);
  absl::StatusOr<int> Start(httplib::Server& server, const std::string& address);

  const AdminSources sources_;
  std::unique_ptr<httplib::Server> healthz_;
  std::unique_ptr<httplib::Server> metrics_;
  int healthz_port_ = 0;
  int metrics_port_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::admin
