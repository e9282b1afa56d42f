// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_builder.h"
#include "lib/base/unique_fd.h"
#include "lib/event/acceptor.h"
#include "lib/event/event_loop.h"

namespace sluice::tunnel::server {

// The accept loop of one gRPC listening socket, run by us: each connection is handed to gRPC
// through ServerBuilder's external connection acceptor (TLS or not, as `creds` say). gRPC 1.51
// (Debian 12) stops accepting on a port for good when accept4 fails with EMFILE
// (grpc/grpc#20418), so one descriptor shortage would lock agents out until a restart; an
// event::Acceptor pauses and resumes instead. Owns the listening socket.
// Thread: Register and Start before serving, the destructor after (any thread; they wait for
// the loop); the accepting runs on the loop.
class GrpcListener final {
 public:
  // Before builder.BuildAndStart(): the connections of `listener` are to be served by the
  // built server with `creds`. `name` is for the log ("agent port 0.0.0.0:8091").
  static std::unique_ptr<GrpcListener> Register(grpc::ServerBuilder& builder,
                                                std::shared_ptr<grpc::ServerCredentials> creds,
                                                base::UniqueFd listener, std::string name);
  // After BuildAndStart: accepts on `loop` from now on.
  absl::Status Start(event::EventLoop& loop);
  // Stops accepting (on the loop, waiting for it) and closes the listening socket.
  ~GrpcListener();
  GrpcListener(const GrpcListener&) = delete;
  GrpcListener& operator=(const GrpcListener&) = delete;

 private:
  GrpcListener(base::UniqueFd listener, std::string name,
               std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to_grpc)
      : listener_(std::move(listener)), name_(std::move(name)), to_grpc_(std::move(to_grpc)) {}
  // Runs fn on the loop (at once when this is the loop's thread) and waits for it.
  absl::Status OnLoop(absl::AnyInvocable<absl::Status()> fn);

  base::UniqueFd listener_;
  const std::string name_;
  // Thread-safe; closes connections handed to it before Start or after the server's shutdown.
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> to_grpc_;
  event::EventLoop* loop_ = nullptr;
  std::unique_ptr<event::Acceptor> acceptor_;  // on *loop_
};

}  // namespace sluice::tunnel::server
