// SPDX-License-Identifier: Apache-2.0
#include "agent/admin/admin_server.h"

#include "absl/strings/str_cat.h"
#include "httplib.h"

#include "agent/base/json.h"
#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/net/address.h"

namespace sluice::admin {

namespace {

// Admin requests are tiny GETs; bound what a client can make us hold.
constexpr size_t kMaxPayload = 4096;
constexpr int kThreadsPerServer = 2;

void ServeHealth(httplib::Response& res, const HealthReport& report) {
  res.status = report.healthy ? 200 : 503;
  res.set_content(report.body, "application/json");
}

}  // namespace

AdminServer::AdminServer(AdminSources sources) : sources_(std::move(sources)) {}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Create(const std::string& healthz_address,
                                                                 const std::string& metrics_address,
                                                                 AdminSources sources) {
  auto server = std::unique_ptr<AdminServer>(new AdminServer(std::move(sources)));
  const AdminSources& src = server->sources_;
  if (!healthz_address.empty()) {
    server->healthz_ = std::make_unique<httplib::Server>();
    server->healthz_->Get("/healthz", [&src](const httplib::Request&, httplib::Response& res) {
      ServeHealth(res, Healthz(src.health()));
    });
    server->healthz_->Get("/livez", [&src](const httplib::Request&, httplib::Response& res) {
      ServeHealth(res, Livez(src.health()));
    });
    // /healthz plus the optional readiness condition, with its reason in the body.
    server->healthz_->Get("/readyz", [&src](const httplib::Request&, httplib::Response& res) {
      HealthReport report = Healthz(src.health());
      const std::string why = src.not_ready ? src.not_ready() : "";
      if (report.healthy && !why.empty()) {
        report =
            HealthReport{.healthy = false, .body = "{\"notReady\": " + base::JsonString(why) + "}"};
      }
      ServeHealth(res, report);
    });
    ASSIGN_OR_RETURN(server->healthz_port_, server->Start(*server->healthz_, healthz_address));
  }
  if (!metrics_address.empty()) {
    server->metrics_ = std::make_unique<httplib::Server>();
    server->metrics_->Get("/metrics", [&src](const httplib::Request&, httplib::Response& res) {
      res.set_content(src.metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server->metrics_->Get("/proxyMode", [&src](const httplib::Request&, httplib::Response& res) {
      res.set_content(src.proxy_mode(), "text/plain; charset=utf-8");
    });
    server->metrics_->Get("/debug/services",
                          [&src](const httplib::Request&, httplib::Response& res) {
                            res.set_content(src.debug_services(), "application/json");
                          });
    if (src.debug_connections) {
      server->metrics_->Get("/debug/connections",
                            [&src](const httplib::Request&, httplib::Response& res) {
                              res.set_content(src.debug_connections(), "application/json");
                            });
    }
    // kube-proxy also answers health on the metrics port.
    server->metrics_->Get("/healthz", [&src](const httplib::Request&, httplib::Response& res) {
      ServeHealth(res, Healthz(src.health()));
    });
    ASSIGN_OR_RETURN(server->metrics_port_, server->Start(*server->metrics_, metrics_address));
  }
  return server;
}

absl::StatusOr<int> AdminServer::Start(httplib::Server& server, const std::string& address) {
  auto addr = net::SocketAddress::Parse(address);
  if (!addr) {
    return absl::InvalidArgumentError(
        absl::StrCat("bind address \"", address, "\": want IP:PORT, e.g. 0.0.0.0:10256"));
  }
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreadsPerServer); };
  server.set_payload_max_length(kMaxPayload);
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_max_count(10);
  // httplib's default options add SO_REUSEPORT, which would let a second agent share the port
  // silently; keep only SO_REUSEADDR.
  server.set_socket_options([](socket_t sock) {
    int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  const std::string host = addr->ip().ToString();
  int port = addr->port();
  if (port == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(
        absl::StrCat("listen on ", address, ": address in use or not local"));
  }
  threads_.emplace_back([&server] { server.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs; wait for it so the destructor cannot hang.
  for (int i = 0; i < 5000 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  LOG(INFO) << "serving admin endpoints on " << net::SocketAddress(addr->ip(), port).ToString();
  return port;
}

AdminServer::~AdminServer() {
  for (auto* s : {healthz_.get(), metrics_.get()}) {
    if (s != nullptr) {
      s->stop();
    }
  }
  for (auto& t : threads_) {
    t.join();
  }
}

}  // namespace sluice::admin
