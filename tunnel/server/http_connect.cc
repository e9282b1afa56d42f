// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/http_connect.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <future>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/address.h"

#include "tunnel/server/connect_session.h"

namespace sluice::tunnel::server {

ConnectHead ParseConnectHead(const std::string& head) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[0].empty()) {
    return {400, ""};
  }
  if (parts[0] != "CONNECT") {
    return {405, ""};
  }
  // The destination is the request-target authority, never the Host header. One without a
  // port goes to the agent as it is, as upstream forwards it: the agent's dial fails with Go's
  // "missing port in address".
  const std::string& target = parts[1];
  const size_t colon = target.rfind(':');
  if (target.empty() || colon == 0 || (colon != std::string::npos && colon + 1 == target.size()) ||
      target.find('/') != std::string::npos) {
    return {400, ""};
  }
  return {0, target};
}

std::string ConnectErrorReply(const std::string& err) {
  int code = 502;
  std::string reason = "Bad Gateway";
  std::string body = err;
  if (err == "No agent available") {
    code = 500;
    reason = "Internal Server Error";
    body = "currently no tunnels available: " + err;
  } else if (absl::StrContains(err, "timeout") || absl::StrContains(err, "deadline exceeded")) {
    code = 504;
    reason = "Gateway Timeout";
  } else if (absl::StrContains(err, "too many open files") || err == Router::kShuttingDown ||
             err == Router::kAgentsFull) {
    code = 503;
    reason = "Service Unavailable";
  } else if (err == Router::kTooManyDials || err == Router::kTooManyTunnels) {
    code = 429;
    reason = "Too Many Requests";
  }
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

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

void HttpConnectFrontend::Retire(ConnectSession* session) {
  // Destroy on a later turn: we may be inside one of the session's own callbacks.
  loop_.Post([this, session] { sessions_.erase(session); });
}

}  // namespace sluice::tunnel::server
