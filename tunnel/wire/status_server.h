// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace sluice::tunnel::wire {

// A tiny HTTP server for /healthz, /readyz and /metrics on one port. Handlers run on its
// threads and must be thread-safe. Owns one listener thread.
class StatusServer final {
 public:
  struct Reply {
    int code = 200;
    std::string body;
    std::string content_type = "text/plain; charset=utf-8";
  };
  using Route = std::pair<std::string, std::function<Reply()>>;

  // Binds `host:port` now (port 0 picks one); a taken port fails here.
  static absl::StatusOr<std::unique_ptr<StatusServer>> Create(const std::string& host, int port,
                                                              std::vector<Route> routes);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;
  int port() const { return port_; }

 private:
  StatusServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace sluice::tunnel::wire
