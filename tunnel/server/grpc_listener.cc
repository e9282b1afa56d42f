// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/grpc_listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <future>
#include <utility>

namespace sluice::tunnel::server {

std::unique_ptr<GrpcListener> GrpcListener::Register(grpc::ServerBuilder& builder,
                                                     std::shared_ptr<grpc::ServerCredentials> creds,
                                                     base::UniqueFd listener, std::string name) {
  auto to_grpc = builder.experimental().AddExternalConnectionAcceptor(
      grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD, std::move(creds));
  return std::unique_ptr<GrpcListener>(
      new GrpcListener(std::move(listener), std::move(name), std::move(to_grpc)));
}

absl::Status GrpcListener::Start(event::EventLoop& loop) {
  loop_ = &loop;
  return OnLoop([this] {
    auto acceptor = event::Acceptor::Create(
        *loop_, listener_.get(), name_,
        [this](base::UniqueFd fd, const sockaddr_storage& peer, socklen_t) {
          if (peer.ss_family == AF_INET || peer.ss_family == AF_INET6) {
            // What gRPC's own accept sets: without it Nagle holds a small frame (a stream's
            // status, a ping) back by a delayed ACK, ~40 ms.
            int one = 1;
            (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          }
          grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
          p.listener_fd = listener_.get();
          p.fd = fd.Release();  // gRPC's from here on, also when it closes it at once
          to_grpc_->HandleNewConnection(&p);
        });
    if (acceptor.ok()) {
      acceptor_ = std::move(*acceptor);
    }
    return acceptor.status();
  });
}

GrpcListener::~GrpcListener() {
  if (loop_ != nullptr) {
    (void)OnLoop([this] {
      acceptor_.reset();
      return absl::OkStatus();
    });
  }
}

absl::Status GrpcListener::OnLoop(absl::AnyInvocable<absl::Status()> fn) {
  if (loop_->IsInLoopThread()) {
    return fn();
  }
  std::promise<absl::Status> done;
  loop_->Post([&] { done.set_value(fn()); });
  return done.get_future().get();
}

}  // namespace sluice::tunnel::server
