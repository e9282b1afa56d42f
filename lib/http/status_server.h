// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/metrics.h"
#include "lib/base/unique_fd.h"

namespace sluice::event {
class Acceptor;
class LoopThread;
}  // namespace sluice::event

namespace sluice::http {

class StatusConnection;
class StatusServerState;

// What one status server lets its clients hold. The defaults suit a health or metrics port
// that any pod can reach: a client is a kubelet probe (one request, then close) or a scraper
// (one kept-alive connection), so every limit leaves those far inside and only bounds abuse.
struct ServerLimits {
  // Open connections in all. At the cap a new connection is still taken: the one whose current
  // phase began longest ago (a slow client, or an idle kept-alive one) is closed for it.
  size_t max_connections = 256;
  // Open connections from one IP address; more are closed at once.
  size_t max_per_source = 8;
  // From accept, or from the first byte of the next request on a kept-alive connection, until a
  // whole request head is in.
  absl::Duration request_timeout = absl::Seconds(10);
  // A kept-alive connection waiting for its next request. None by default, as Go's net/http
  // server (no IdleTimeout, no ReadTimeout): clients that pool connections (Prometheus) keep
  // theirs instead of reconnecting for every scrape. The caps above bound what they hold.
  absl::Duration idle_timeout = absl::InfiniteDuration();
  // Until a whole response is written.
  absl::Duration write_timeout = absl::Seconds(10);
  // After a refusal (431, 400...), how long the rest of the client's request is read and dropped
  // before the close, so that the refusal reaches it.
  absl::Duration linger_timeout = absl::Seconds(2);
  // Request line and header fields together; more is refused with 431 and the connection closed.
  size_t max_head_bytes = 8192;
};

// One small HTTP/1.1 server answering GETs (and HEADs) on fixed paths (health, readiness,
// metrics, debug), as sluice-agent, sluice-tunnel-server and sluice-proxy-agent serve them.
// Owns the bound socket and one event-loop thread that serves every connection: a client that
// sends slowly or never reads costs one fd and a bounded buffer, never a thread, so it cannot
// starve a kubelet probe. It replaces cpp-httplib, which holds a pool thread per connection for
// as long as the request takes to arrive, with a timeout per read rather than per request, and
// has no per-source limit: two slow-header clients held both threads and /healthz timed out
// (issue 26). The request reader is ours (request_head.h): request line and header fields only,
// since these routes take no bodies. See ServerLimits for what a client can hold.
// Thread: Create and the destructor on any one thread; handlers run on the server's thread and
// must be thread-safe, and quick: they hold up the server's other clients while they run.
class StatusServer final {
 public:
  struct Reply {
    int code = 200;
    std::string body;
    std::string content_type = "text/plain; charset=utf-8";
    std::vector<std::pair<std::string, std::string>> headers;  // sent as given, after the rest
    // Non-zero: the reply is a 301 to the same target on this port of the host the request
    // named (its Host field), as Go's http.Redirect writes it; code and body are then ignored.
    int redirect_port = 0;
  };
  // A GET of the path (exactly, query aside), or of any path when the path is "*".
  using Route = std::pair<std::string, std::function<Reply()>>;
  // `registry` rendered in the Prometheus text format, as every /metrics of ours answers.
  static Reply Metrics(const base::Registry& registry) {
    return Reply{200, registry.Render(), "text/plain; version=0.0.4; charset=utf-8"};
  }

  // Binds `host:port` now (empty host: every address; port 0 picks one), so a taken or
  // non-local address fails here, naming it. Serving starts before this returns.
  static absl::StatusOr<std::unique_ptr<StatusServer>> Create(const std::string& host, int port,
                                                              std::vector<Route> routes) {
    return Create(host, port, std::move(routes), ServerLimits{});
  }
  static absl::StatusOr<std::unique_ptr<StatusServer>> Create(const std::string& host, int port,
                                                              std::vector<Route> routes,
                                                              const ServerLimits& limits);
  // Stops accepting, closes every connection and joins; safe immediately after Create.
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  // The port bound (the chosen one when Create was given 0).
  int port() const { return port_; }

 private:
  StatusServer(base::UniqueFd listener, int port, std::unique_ptr<StatusServerState> state,
               std::unique_ptr<event::LoopThread> thread);

  const base::UniqueFd listener_;
  const int port_;
  std::unique_ptr<StatusServerState> state_;  // lives on the loop thread
  std::unique_ptr<event::LoopThread> thread_;
};

}  // namespace sluice::http
