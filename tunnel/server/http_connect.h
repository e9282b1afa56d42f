// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "agent/base/unique_fd.h"
#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"
#include "tunnel/wire/io_loop.h"
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
  const wire::TlsContext* tls = nullptr;  // TCP frontends: TLS (mTLS with a client CA)
};

// The HTTP CONNECT frontend on one listening socket (Unix plaintext, or TCP with TLS). Owns the
// listener and its sessions. Thread: the IoLoop's, except Create and the destructor.
class HttpConnectFrontend final : public wire::IoLoop::Handler {
 public:
  static absl::StatusOr<std::unique_ptr<HttpConnectFrontend>> Create(wire::IoLoop& loop,
                                                                     base::UniqueFd listener,
                                                                     Router& router,
                                                                     ServerMetrics& metrics,
                                                                     HttpConnectOptions options);
  // Blocks until the loop dropped the listener and every session.
  ~HttpConnectFrontend() override;

  // wire::IoLoop::Handler (the listener)
  void OnIoReady(uint32_t events) override;
  // A session ends: it is destroyed on a later loop turn.
  void Retire(ConnectSession* session);

 private:
  HttpConnectFrontend(wire::IoLoop& loop, base::UniqueFd listener, Router& router,
                      ServerMetrics& metrics, HttpConnectOptions options);

  wire::IoLoop& loop_;
  base::UniqueFd listener_;
  Router& router_;
  ServerMetrics& metrics_;
  const HttpConnectOptions options_;
  std::map<ConnectSession*, std::shared_ptr<ConnectSession>> sessions_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace sluice::tunnel::server
