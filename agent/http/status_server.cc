// SPDX-License-Identifier: Apache-2.0
#include "agent/http/status_server.h"

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace sluice::http {

namespace {

// Status requests are tiny GETs; bound what a client can make us hold.
constexpr size_t kMaxPayload = 4096;
constexpr int kHandlerThreads = 2;

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

}  // namespace

StatusServer::StatusServer(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {
  // httplib 0.11's stop() does nothing until listen_after_bind() has set is_running_, so a stop
  // that wins the race with the new thread is lost and the join hangs. listen_internal() sets
  // is_running_ and then asks for its task queue: that call is our "accepting" signal.
  server_->new_task_queue = [this] {
    accepting_.Notify();
    return new httplib::ThreadPool(kHandlerThreads);
  };
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

absl::StatusOr<std::unique_ptr<StatusServer>> StatusServer::Create(const std::string& host,
                                                                   int port,
                                                                   std::vector<Route> routes) {
  auto server = std::make_unique<httplib::Server>();
  server->set_payload_max_length(kMaxPayload);
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  server->set_keep_alive_max_count(10);
  // httplib's default options add SO_REUSEPORT, which would let a second process share the port
  // silently; keep only SO_REUSEADDR.
  server->set_socket_options([](socket_t sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  for (auto& route : routes) {
    const std::string pattern = route.first == "*" ? ".*" : route.first;
    server->Get(pattern,
                [fn = std::move(route.second)](const httplib::Request&, httplib::Response& res) {
                  Reply r = fn();
                  res.status = r.code;
                  for (auto& [name, value] : r.headers) {
                    res.set_header(name, value);
                  }
                  res.set_content(r.body, r.content_type.c_str());
                });
  }
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  int bound = -1;
  if (port == 0) {
    bound = server->bind_to_any_port(bind_host);
  } else if (server->bind_to_port(bind_host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("listen on ", HostPort(bind_host, port), ": address in use or not local"));
  }
  return std::unique_ptr<StatusServer>(new StatusServer(std::move(server), bound));
}

StatusServer::~StatusServer() {
  accepting_.WaitForNotification();
  server_->stop();
  thread_.join();
}

}  // namespace sluice::http
