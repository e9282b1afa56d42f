// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"

#include "agent/base/metrics.h"

namespace httplib {
class Server;
}

namespace sluice::http {

// One small HTTP server answering GETs on fixed paths (health, readiness, metrics, debug), as
// sluice-agent, sluice-tunnel-server and sluice-proxy-agent serve them. Owns the bound socket,
// one listener thread and a pool of two handler threads (so a keep-alive scraper cannot hold up
// a kubelet probe). Thread: Create and the destructor on any one thread; handlers run on the
// server's threads and must be thread-safe.
class StatusServer final {
 public:
  struct Reply {
    int code = 200;
    std::string body;
    std::string content_type = "text/plain; charset=utf-8";
    std::vector<std::pair<std::string, std::string>> headers;  // sent as given, after the rest
  };
  // A GET of the path (exactly), or of any path when the path is "*".
  using Route = std::pair<std::string, std::function<Reply()>>;
  // `registry` rendered in the Prometheus text format, as every /metrics of ours answers.
  static Reply Metrics(const base::Registry& registry) {
    return Reply{200, registry.Render(), "text/plain; version=0.0.4; charset=utf-8"};
  }

  // Binds `host:port` now (empty host: every address; port 0 picks one), so a taken or
  // non-local address fails here, naming it. Serving starts before this returns.
  static absl::StatusOr<std::unique_ptr<StatusServer>> Create(const std::string& host, int port,
                                                              std::vector<Route> routes);
  // Stops accepting and joins; safe immediately after Create.
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // The port bound (the chosen one when Create was given 0).
  int port() const { return port_; }

 private:
  StatusServer(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  absl::Notification accepting_;  // the listener thread is in httplib's accept loop
  std::thread thread_;
};

}  // namespace sluice::http
