// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/http_connect.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <future>

#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/address.h"

namespace sluice::tunnel::server {

absl::StatusOr<std::unique_ptr<HttpConnectFrontend>> HttpConnectFrontend::Create(
    event::EventLoop& loop, base::UniqueFd listener, Router& router, ServerMetrics& metrics,
    HttpConnectOptions options) {
  auto f = std::unique_ptr<HttpConnectFrontend>(
      new HttpConnectFrontend(loop, std::move(listener), router, metrics, options));
  RETURN_IF_ERROR(f->OnLoop([raw = f.get()] {
    auto acceptor =
        event::Acceptor::Create(raw->loop_, raw->listener_.get(), "http-connect frontend",
                                [raw](base::UniqueFd fd, const sockaddr_storage& peer,
                                      socklen_t len) { raw->Accept(std::move(fd), peer, len); });
    if (acceptor.ok()) {
      raw->acceptor_ = std::move(*acceptor);
    }
    return acceptor.status();
  }));
  return f;
}

absl::Status HttpConnectFrontend::OnLoop(absl::AnyInvocable<absl::Status()> fn) {
  // A loop turned by hand (tests) runs on this very thread and would never serve a Post.
  if (loop_.IsInLoopThread()) {
    return fn();
  }
  std::promise<absl::Status> done;
  loop_.Post([&] { done.set_value(fn()); });
  return done.get_future().get();
}

HttpConnectFrontend::HttpConnectFrontend(event::EventLoop& loop, base::UniqueFd listener,
                                         Router& router, ServerMetrics& metrics,
                                         HttpConnectOptions options)
    : loop_(loop),
      listener_(std::move(listener)),
      router_(router),
      metrics_(metrics),
      options_(options) {}

HttpConnectFrontend::~HttpConnectFrontend() {
  (void)OnLoop([this] {
    acceptor_.reset();
    for (auto& [raw, session] : sessions_) {
      session->Shutdown();
    }
    sessions_.clear();
    return absl::OkStatus();
  });
}

void HttpConnectFrontend::Accept(base::UniqueFd fd, const sockaddr_storage& peer, socklen_t len) {
  auto address = net::SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&peer), len);
  auto session = ConnectSession::Create(loop_, std::move(fd), *this, router_, metrics_, options_,
                                        static_cast<int64_t>(rng_() >> 1),
                                        address ? address->ip().ToString() : "unix");
  if (!session.ok()) {
    LOG(WARNING) << "http-connect session: " << session.status();
    return;
  }
  ConnectSession* raw = session->get();
  sessions_[raw] = std::move(*session);
}

void HttpConnectFrontend::OnSessionDone(ConnectSession* session) {
  // Destroy on a later turn: we may be inside one of the session's own callbacks.
  loop_.Post([this, session] { sessions_.erase(session); });
}

}  // namespace sluice::tunnel::server
