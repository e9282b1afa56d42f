// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/acceptor.h"
#include "lib/event/event_loop.h"

#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"
#include "tunnel/wire/byte_budget.h"
#include "tunnel/wire/stall_watch.h"
#include "tunnel/wire/tls.h"

namespace sluice::tunnel::server {

class ConnectSession;

// Parsed "CONNECT host:port HTTP/1.1" head. Exposed for tests.
struct ConnectHead {
  int status = 0;  // 0 = ok, else the HTTP error to answer (400, 405)
  std::string authority;
};
ConnectHead ParseConnectHead(const std::string& head);

// The status line and body for a failed dial, as upstream's HTTP CONNECT frontend answers.
std::string ConnectErrorReply(const std::string& dial_error);

struct HttpConnectOptions {
  absl::Duration header_timeout = absl::Seconds(10);
  size_t max_header_bytes = 16 * 1024;
  size_t max_queued = 16 << 20;
  // With an agent without the window extension: how long a client may read nothing while
  // bytes wait for it before it is cut (wire::StallWatch).
  absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout;
  wire::ByteBudget* budget = nullptr;     // server-wide, outlives the frontend
  const wire::TlsContext* tls = nullptr;  // TCP frontends: TLS (mTLS with a client CA)
};

// The HTTP CONNECT frontend on one listening socket (Unix plaintext, or TCP with TLS). Owns the
// listener and its sessions. Thread: the tunnel loop's, except Create and the destructor (any
// thread; they wait for the loop).
class HttpConnectFrontend final {
 public:
  static absl::StatusOr<std::unique_ptr<HttpConnectFrontend>> Create(event::EventLoop& loop,
                                                                     base::UniqueFd listener,
                                                                     Router& router,
                                                                     ServerMetrics& metrics,
                                                                     HttpConnectOptions options);
  // Blocks until the loop dropped the listener and every session.
  ~HttpConnectFrontend();

  // A session ends: it is destroyed on a later loop turn.
  void Retire(ConnectSession* session);

 private:
  HttpConnectFrontend(event::EventLoop& loop, base::UniqueFd listener, Router& router,
                      ServerMetrics& metrics, HttpConnectOptions options);
  void Accept(base::UniqueFd fd, const sockaddr_storage& peer, socklen_t len);
  // Runs fn on the loop and waits for it.
  absl::Status OnLoop(absl::AnyInvocable<absl::Status()> fn);

  event::EventLoop& loop_;
  base::UniqueFd listener_;
  std::unique_ptr<event::Acceptor> acceptor_;  // loop thread
  Router& router_;
  ServerMetrics& metrics_;
  const HttpConnectOptions options_;
  std::map<ConnectSession*, std::shared_ptr<ConnectSession>> sessions_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace sluice::tunnel::server
