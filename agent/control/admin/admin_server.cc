// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/admin_server.h"

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/address.h"

namespace sluice::admin {

namespace {

using Reply = http::StatusServer::Reply;

// kube-proxy's health handlers set both headers.
Reply HealthReply(const HealthReport& report) {
  return Reply{report.healthy ? 200 : 503,
               report.body,
               "application/json",
               {{"X-Content-Type-Options", "nosniff"}}};
}

// kube-proxy 1.28+'s kubeproxy_proxy_healthz_total / kubeproxy_proxy_livez_total: every answer
// of the health server counted by status code. Null without a registry.
base::Family<base::Counter>* Codes(base::Registry* registry, const char* name, const char* help) {
  return registry == nullptr ? nullptr : &registry->AddCounter(name, help, {"code"});
}

Reply Counted(base::Family<base::Counter>* codes, const HealthReport& report) {
  if (codes != nullptr) {
    codes->WithLabels({report.healthy ? "200" : "503"}).Inc();
  }
  return HealthReply(report);
}

// Serves `routes` on `address` (IP:PORT); null when `address` is empty (disabled).
absl::StatusOr<std::unique_ptr<http::StatusServer>> Serve(
    const std::string& address, std::vector<http::StatusServer::Route> routes) {
  if (address.empty()) {
    return nullptr;
  }
  auto addr = net::SocketAddress::Parse(address);
  if (!addr) {
    return absl::InvalidArgumentError(
        absl::StrCat("bind address \"", address, "\": want IP:PORT, e.g. 0.0.0.0:10256"));
  }
  ASSIGN_OR_RETURN(auto server, http::StatusServer::Create(addr->ip().ToString(), addr->port(),
                                                           std::move(routes)));
  LOG(INFO) << "serving admin endpoints on "
            << net::SocketAddress(addr->ip(), server->port()).ToString();
  return server;
}

}  // namespace

AdminServer::AdminServer(AdminSources sources) : sources_(std::move(sources)) {}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Create(const std::string& healthz_address,
                                                                 const std::string& metrics_address,
                                                                 AdminSources sources) {
  auto server = std::unique_ptr<AdminServer>(new AdminServer(std::move(sources)));
  const AdminSources& src = server->sources_;
  base::Family<base::Counter>* healthz_codes =
      Codes(src.metrics, "kubeproxy_proxy_healthz_total", "Cumulative proxy healthz HTTP status");
  base::Family<base::Counter>* livez_codes =
      Codes(src.metrics, "kubeproxy_proxy_livez_total", "Cumulative proxy livez HTTP status");
  ASSIGN_OR_RETURN(
      server->healthz_,
      Serve(healthz_address,
            {{"/healthz",
              [&src, healthz_codes] { return Counted(healthz_codes, Healthz(src.health())); }},
             {"/livez", [&src, livez_codes] { return Counted(livez_codes, Livez(src.health())); }},
             // /healthz plus the optional readiness condition, with its reason.
             {"/readyz", [&src] {
                HealthReport report = Healthz(src.health());
                const std::string why = src.not_ready ? src.not_ready() : "";
                if (report.healthy && !why.empty()) {
                  report = HealthReport{.healthy = false,
                                        .body = "{\"notReady\": " + base::JsonString(why) + "}"};
                }
                return HealthReply(report);
              }}}));
  std::vector<http::StatusServer::Route> metrics = {
      {"/metrics", [&src] { return http::StatusServer::Metrics(*src.metrics); }},
      {"/proxyMode",
       [&src] {
         return Reply{200, src.proxy_mode(), "text/plain; charset=utf-8"};
       }},
      {"/debug/services",
       [&src] {
         return Reply{200, src.debug_services(), "application/json"};
       }},
      // kube-proxy also answers health on the metrics port.
      {"/healthz", [&src] { return HealthReply(Healthz(src.health())); }}};
  if (src.debug_connections) {
    metrics.emplace_back("/debug/connections", [&src] {
      return Reply{200, src.debug_connections(), "application/json"};
    });
  }
  ASSIGN_OR_RETURN(server->metrics_, Serve(metrics_address, std::move(metrics)));
  return server;
}

}  // namespace sluice::admin
