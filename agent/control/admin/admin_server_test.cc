// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/admin_server.h"

#include "gtest/gtest.h"
#include "httplib.h"

#include "agent/control/admin/debug_services.h"

namespace sluice::admin {
namespace {

TEST(AdminServerTest, ServesEveryEndpointOnLoopback) {
  base::Registry registry;
  registry.AddCounter("sluice_test_total", "t").Get().Inc();
  bool healthy = false;
  AdminSources sources{.health =
                           [&] {
                             HealthInputs in{
                                 .now = absl::Now(),
                                 .started = absl::Now(),
                                 .last_updated = healthy ? absl::Now() : absl::InfinitePast(),
                                 .oldest_pending = absl::InfiniteFuture(),
                                 .sources_synced = healthy,
                                 .timeout = absl::Seconds(60)};
                             return in;
                           },
                       .proxy_mode = [] { return std::string("splice"); },
                       .debug_services = [] { return std::string("{\"servicePorts\": []}"); },
                       .metrics = &registry};
  auto server = AdminServer::Create("127.0.0.1:0", "127.0.0.1:0", std::move(sources));
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client health("127.0.0.1", (*server)->healthz_port());
  httplib::Client metrics("127.0.0.1", (*server)->metrics_port());
  auto res = health.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("\"currentTime\""), std::string::npos);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  healthy = true;
  EXPECT_EQ(health.Get("/healthz")->status, 200);
  res = health.Get("/livez");
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(health.Get("/metrics")->status, 404);  // metrics live on the other server
  res = metrics.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("sluice_test_total 1"), std::string::npos);
  // kube-proxy's counters of the health server's answers.
  EXPECT_NE(res->body.find("kubeproxy_proxy_healthz_total{code=\"503\"} 1"), std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("kubeproxy_proxy_healthz_total{code=\"200\"} 1"), std::string::npos);
  EXPECT_NE(res->body.find("kubeproxy_proxy_livez_total{code=\"200\"} 1"), std::string::npos);
  EXPECT_NE(res->body.find("# HELP kubeproxy_proxy_healthz_total Cumulative proxy healthz HTTP "
                           "status"),
            std::string::npos);
  EXPECT_EQ(metrics.Get("/proxyMode")->body, "splice");
  EXPECT_EQ(metrics.Get("/debug/services")->body, "{\"servicePorts\": []}");
}

TEST(AdminServerTest, BadOrTakenAddressFailsAtCreate) {
  AdminSources sources{.metrics = nullptr};
  auto bad = AdminServer::Create("localhost", "", sources);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto first = AdminServer::Create("127.0.0.1:0", "", sources);
  ASSERT_TRUE(first.ok());
  auto taken =
      AdminServer::Create(absl::StrCat("127.0.0.1:", (*first)->healthz_port()), "", sources);
  EXPECT_FALSE(taken.ok());
}

TEST(DebugServicesTest, RendersTable) {
  auto info = std::make_shared<proxier::ServicePortInfo>();
  info->name = {{"default", "web"}, "http", config::Protocol::kTcp};
  info->port = 80;
  info->cluster_ips = {*net::IpAddress::Parse("10.96.0.10")};
  info->cluster_endpoints = {*net::SocketAddress::Parse("10.0.0.1:8080")};
  proxier::ServiceTable table({{info->name, info}});
  std::string json =
      RenderDebugServices(table, {.listeners = {{"default/web:http", {"tcp/10.96.0.10:80"}}},
                                  .socket_lb = {{"default/web:http", {"tcp/10.96.0.10:80"}}},
                                  .external_bpf = {{"default/web:http", {"tcp/192.0.2.1:30080"}}}});
  EXPECT_NE(json.find("\"service\": \"default/web\", \"port\": \"http\", \"protocol\": \"TCP\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"clusterEndpoints\": [\"10.0.0.1:8080\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"listeners\": [\"tcp/10.96.0.10:80\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"socketLb\": [\"tcp/10.96.0.10:80\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"externalBpf\": [\"tcp/192.0.2.1:30080\"]"), std::string::npos) << json;
}

}  // namespace
}  // namespace sluice::admin
