// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/status_server.h"

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace sluice::tunnel::wire {

absl::StatusOr<std::unique_ptr<StatusServer>> StatusServer::Create(const std::string& host,
                                                                   int port,
                                                                   std::vector<Route> routes) {
  auto s = std::unique_ptr<StatusServer>(new StatusServer());
  s->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *s->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  server.set_payload_max_length(4096);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_socket_options([](socket_t sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  for (auto& [path, fn] : routes) {
    server.Get(path, [fn = std::move(fn)](const httplib::Request&, httplib::Response& res) {
      Reply r = fn();
      res.status = r.code;
      res.set_content(r.body, r.content_type.c_str());
    });
  }
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  if (port == 0) {
    s->port_ = server.bind_to_any_port(bind_host);
  } else {
    s->port_ = server.bind_to_port(bind_host, port) ? port : -1;
  }
  if (s->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("listen ", bind_host, ":", port, ": bind failed"));
  }
  s->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return s;
}

StatusServer::~StatusServer() {
  if (server_) {
    server_->stop();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace sluice::tunnel::wire
