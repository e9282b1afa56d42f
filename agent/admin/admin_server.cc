// SPDX-License-Identifier: Apache-2.0
#include "agent/admin/admin_server.h"

#include "absl/strings/str_cat.h"

#include "agent/base/json.h"
#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/net/address.h"

namespace sluice::admin {

namespace {

using Reply = http::StatusServer::Reply;

Reply HealthReply(const HealthReport& report) {
  return Reply{report.healthy ? 200 : 503, report.body, "application/json"};
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
  ASSIGN_OR_RETURN(
      server->healthz_,
      Serve(healthz_address, {{"/healthz", [&src] { return HealthReply(Healthz(src.health())); }},
                              {"/livez", [&src] { return HealthReply(Livez(src.health())); }},
                              // /healthz plus the optional readiness condition, with its reason.
                              {"/readyz", [&src] {
                                 HealthReport report = Healthz(src.health());
                                 const std::string why = src.not_ready ? src.not_ready() : "";
                                 if (report.healthy && !why.empty()) {
                                   report = HealthReport{
                                       .healthy = false,
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
