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

#include "tunnel/server/connect_session.h"
#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"

namespace sluice::tunnel::server {

// The HTTP CONNECT frontend on one listening socket (Unix plaintext, or TCP with TLS). Owns the
// listener and its sessions. Thread: the tunnel loop's, except Create and the destructor (any
// thread; they wait for the loop).
class HttpConnectFrontend final : public ConnectSession::Owner {
 public:
  static absl::StatusOr<std::unique_ptr<HttpConnectFrontend>> Create(event::EventLoop& loop,
                                                                     base::UniqueFd listener,
                                                                     Router& router,
                                                                     ServerMetrics& metrics,
                                                                     HttpConnectOptions options);
  // Blocks until the loop dropped the listener and every session.
  ~HttpConnectFrontend() override;

  // ConnectSession::Owner: the session is destroyed on a later loop turn.
  void OnSessionDone(ConnectSession* session) override;

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
