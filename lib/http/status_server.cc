// SPDX-License-Identifier: Apache-2.0
#include "lib/http/status_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>

#include <future>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/event/acceptor.h"
#include "lib/event/loop_thread.h"
#include "lib/http/status_connection.h"

namespace sluice::http {

namespace {

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

// A listening socket on the first address `host` resolves to that binds. Only SO_REUSEADDR:
// SO_REUSEPORT would let a second process share the port silently. The backlog is the kernel's
// cap (net.core.somaxconn), so a burst of connections waits to be accepted instead of being
// dropped while the loop is busy.
absl::StatusOr<base::UniqueFd> Listen(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("listen on ", HostPort(host, port), ": ", gai_strerror(rc)));
  }
  int err = EADDRNOTAVAIL;
  base::UniqueFd fd;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd.Reset(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
    int one = 1;
    int zero = 0;
    if (fd && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
        (ai->ai_family != AF_INET6 ||  // "::" takes IPv4 too, as before
         setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0) &&
        bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd.get(), SOMAXCONN) == 0) {
      break;
    }
    err = errno;
    fd.Reset();
  }
  freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (fd && getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    err = errno;
    fd.Reset();
  }
  if (!fd) {
    return absl::UnavailableError(
        absl::StrCat("listen on ", HostPort(host, port), ": ", strerror(err)));
  }
  *bound_port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

// The peer's IP, an IPv4-mapped IPv6 address as IPv4: the key of the per-source cap.
std::string SourceOf(const sockaddr_storage& peer) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (peer.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr, buf, sizeof(buf));
  } else if (peer.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    }
  }
  return buf;
}

// A 301 to `port` on the host the request named, keeping path and query. The Location has no
// scheme ("//host:port/path"), as Go's http.Redirect writes a URL whose Host was replaced.
StatusServer::Reply Redirect(const RequestHead& head, int port) {
  std::string host = head.host;  // "name", "name:port", "[v6]" or "[v6]:port"
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host.erase(colon);
  }
  std::string location = absl::StrCat("//", HostPort(host, port), head.path);
  if (!head.query.empty()) {
    absl::StrAppend(&location, "?", head.query);
  }
  StatusServer::Reply reply{301,
                            absl::StrCat("<a href=\"", location, "\">Moved Permanently</a>.\n\n"),
                            "text/html; charset=utf-8"};
  reply.headers.emplace_back("Location", location);
  return reply;
}

}  // namespace

// Everything a StatusServer serves with: routes, limits, the acceptor and the open connections.
// Thread: the server's loop (created before it serves, destroyed after it stopped).
class StatusServerState final : public StatusConnectionCallbacks {
 public:
  StatusServerState(event::EventLoop& loop, std::string name, std::vector<StatusServer::Route> r,
                    const ServerLimits& limits)
      : loop_(loop), name_(std::move(name)), routes_(std::move(r)), limits_(limits) {}

  absl::Status Start(int listen_fd) {
    auto acceptor = event::Acceptor::Create(loop_, listen_fd, name_,
                                            [this](base::UniqueFd fd, const sockaddr_storage& peer,
                                                   socklen_t) { OnAccept(std::move(fd), peer); });
    if (!acceptor.ok()) {
      return acceptor.status();
    }
    acceptor_ = std::move(*acceptor);
    return absl::OkStatus();
  }

  // Closes everything that watches the loop, so the loop can go.
  void Stop() {
    acceptor_.reset();
    connections_.clear();
    per_source_.clear();
  }

  // StatusConnectionCallbacks
  StatusServer::Reply OnRequest(const RequestHead& head) override {
    for (const auto& [route, fn] : routes_) {
      if (route == head.path || route == "*") {
        StatusServer::Reply reply = fn();
        return reply.redirect_port == 0 ? reply : Redirect(head, reply.redirect_port);
      }
    }
    return StatusServer::Reply{404, "404 page not found\n"};
  }
  void OnClosed(StatusConnection& conn) override {
    auto it = per_source_.find(conn.source());
    if (it != per_source_.end() && --it->second == 0) {
      per_source_.erase(it);
    }
    auto node = connections_.extract(&conn);
    if (!node.empty()) {
      loop_.DeferDelete(std::move(node.mapped()));
    }
  }

 private:
  void OnAccept(base::UniqueFd fd, const sockaddr_storage& peer) {
    std::string source = SourceOf(peer);
    if (auto it = per_source_.find(source);
        it != per_source_.end() && it->second >= limits_.max_per_source) {
      Warn(absl::StrCat("refusing a connection from ", source, ": it has ", it->second,
                        " open, the most one address may"));
      return;  // fd closes here
    }
    if (connections_.size() >= limits_.max_connections) {
      Evict();
    }
    auto conn = StatusConnection::Create(loop_, std::move(fd), source, limits_, *this);
    if (!conn.ok()) {
      LOG(WARNING) << name_ << ": " << conn.status();
      return;
    }
    ++per_source_[source];
    StatusConnection* raw = conn->get();
    connections_.emplace(raw, std::move(*conn));
  }

  // Closes the connection whose phase began longest ago: a slow or idle one, never the newest.
  void Evict() {
    StatusConnection* oldest = nullptr;
    for (const auto& [raw, conn] : connections_) {
      if (oldest == nullptr || raw->phase_order() < oldest->phase_order()) {
        oldest = raw;
      }
    }
    if (oldest != nullptr) {
      Warn(absl::StrCat("at ", limits_.max_connections, " connections: closing the one from ",
                        oldest->source(), " idle longest"));
      oldest->Close();
    }
  }

  // At most one warning per 10 s: a flood must not become a flood of log lines.
  void Warn(const std::string& what) {
    if (loop_.MonotonicNow() - last_warning_ >= absl::Seconds(10)) {
      last_warning_ = loop_.MonotonicNow();
      LOG(WARNING) << name_ << ": " << what;
    }
  }

  event::EventLoop& loop_;
  const std::string name_;
  const std::vector<StatusServer::Route> routes_;
  const ServerLimits limits_;
  std::unique_ptr<event::Acceptor> acceptor_;
  std::unordered_map<StatusConnection*, std::unique_ptr<StatusConnection>> connections_;
  std::unordered_map<std::string, size_t> per_source_;
  base::MonoTime last_warning_ = base::MonoTime::InfinitePast();
};

absl::StatusOr<std::unique_ptr<StatusServer>> StatusServer::Create(const std::string& host,
                                                                   int port,
                                                                   std::vector<Route> routes,
                                                                   const ServerLimits& limits) {
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  int bound = 0;
  ASSIGN_OR_RETURN(base::UniqueFd listener, Listen(bind_host, port, &bound));
  ASSIGN_OR_RETURN(auto thread, event::LoopThread::Create(absl::StrCat("status:", bound)));
  auto state = std::make_unique<StatusServerState>(
      thread->loop(), absl::StrCat("status server ", HostPort(bind_host, bound)), std::move(routes),
      limits);
  std::promise<absl::Status> started;
  thread->loop().Post([&, fd = listener.get()] { started.set_value(state->Start(fd)); });
  RETURN_IF_ERROR(started.get_future().get());
  return std::unique_ptr<StatusServer>(
      new StatusServer(std::move(listener), bound, std::move(state), std::move(thread)));
}

StatusServer::StatusServer(base::UniqueFd listener, int port,
                           std::unique_ptr<StatusServerState> state,
                           std::unique_ptr<event::LoopThread> thread)
    : listener_(std::move(listener)),
      port_(port),
      state_(std::move(state)),
      thread_(std::move(thread)) {}

StatusServer::~StatusServer() {
  std::promise<void> stopped;
  thread_->loop().Post([&] {
    state_->Stop();
    stopped.set_value();
  });
  stopped.get_future().wait();
  thread_.reset();  // joins; connections handed to DeferDelete are freed with the loop
}

}  // namespace sluice::http
