// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/service_health.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>

#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/base/unique_fd.h"

#include "agent/control/proxier/fake_proxier.h"
#include "tests/testutil/process.h"

namespace sluice::admin {
namespace {

const config::NamespacedName kWeb{"default", "web"};
const config::NamespacedName kApi{"prod", "api"};

proxier::EndpointInfo Ep(const std::string& addr, const std::string& node, bool ready = true) {
  proxier::EndpointInfo e;
  e.address = *net::SocketAddress::Parse(addr);
  e.node_name = node;
  e.ready = ready;
  e.serving = ready;
  e.terminating = !ready;
  return e;
}

std::shared_ptr<proxier::ServicePortInfo> Port(const config::NamespacedName& svc,
                                               const std::string& name, int health_port,
                                               std::vector<proxier::EndpointInfo> endpoints) {
  auto info = std::make_shared<proxier::ServicePortInfo>();
  info->name = {svc, name, config::Protocol::kTcp};
  info->health_check_node_port = health_port;
  info->endpoints = std::move(endpoints);
  return info;
}

std::shared_ptr<const proxier::ServiceTable> Table(
    const std::vector<std::shared_ptr<proxier::ServicePortInfo>>& ports) {
  std::map<proxier::ServicePortName, proxier::ServicePortInfoPtr> m;
  for (const auto& p : ports) {
    m[p->name] = p;
  }
  return std::make_shared<const proxier::ServiceTable>(std::move(m));
}

TEST(ServiceHealthTest, HealthCheckPortsOfServicesThatHaveOne) {
  auto table = Table(
      {Port(kWeb, "http", 32100, {}), Port(kWeb, "https", 32100, {}), Port(kApi, "http", 0, {})});
  EXPECT_EQ(HealthCheckPorts(*table), (std::map<config::NamespacedName, int>{{kWeb, 32100}}));
}

// kube-proxy counts distinct IPs of ready endpoints on this node over all the service's ports.
TEST(ServiceHealthTest, CountsDistinctLocalReadyIps) {
  auto table = Table(
      {Port(kWeb, "http", 32100,
            {Ep("10.0.0.1:80", "node1"), Ep("10.0.0.2:80", "node1", false),
             Ep("10.0.0.3:80", "node2"), Ep("10.0.0.5:80", "node1")}),
       Port(kWeb, "https", 32100, {Ep("10.0.0.1:443", "node1"), Ep("[fd00::1]:443", "node1")}),
       Port(kApi, "http", 0, {Ep("10.0.0.9:80", "node1")})});
  EXPECT_EQ(LocalReadyEndpoints(*table, kWeb, "node1"), 2);  // .1 (twice), .5; fd00::1 alone
  auto dual = Table({Port(
      kWeb, "http", 32100,
      {Ep("10.0.0.1:80", "node1"), Ep("[fd00::1]:80", "node1"), Ep("[fd00::2]:80", "node1")})});
  EXPECT_EQ(LocalReadyEndpoints(*dual, kWeb, "node1"), 2) << "the larger family's count";
  EXPECT_EQ(LocalReadyEndpoints(*table, kWeb, "node2"), 1);
  EXPECT_EQ(LocalReadyEndpoints(*table, kWeb, "node3"), 0);
  EXPECT_EQ(LocalReadyEndpoints(*table, {"default", "other"}, "node1"), 0);
}

// Byte for byte what kube-proxy 1.31 writes (service_health.go: a tab-indented template through
// dedent.Dedent and strings.Trim of newlines).
TEST(ServiceHealthTest, ReplyIsKubeProxysBytes) {
  http::StatusServer::Reply ok = ServiceHealthReply(kWeb, 2, true);
  EXPECT_EQ(ok.code, 200);
  EXPECT_EQ(ok.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n"
            "\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}");
  EXPECT_EQ(ok.content_type, "application/json");
  using Headers = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ok.headers, (Headers{{"X-Content-Type-Options", "nosniff"},
                                 {"X-Load-Balancing-Endpoint-Weight", "2"}}));

  http::StatusServer::Reply none = ServiceHealthReply(kWeb, 0, true);
  EXPECT_EQ(none.code, 503);
  EXPECT_EQ(none.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n"
            "\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}");
  EXPECT_EQ(none.headers[1].second, "0");
  http::StatusServer::Reply sick = ServiceHealthReply(kWeb, 1, false);
  EXPECT_EQ(sick.code, 503);
  EXPECT_NE(sick.body.find("\"serviceProxyHealthy\": false\n}"), std::string::npos);
}

class ServersTest : public ::testing::Test {
 protected:
  ServersTest()
      : servers_({.node_name = "node1",
                  .listen_hosts = [] { return std::vector<std::string>{"127.0.0.1"}; },
                  .proxy_healthy = [this] { return healthy_.load(); },
                  .metrics = &registry_}) {}

  // The status and body of a GET on `port`; status -1 when nothing answers.
  std::pair<int, std::string> Get(int port, const std::string& path = "/") {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    auto res = c.Get(path.c_str());
    if (!res) {
      return {-1, ""};
    }
    return {res->status, res->body};
  }

  base::Registry registry_;
  std::atomic<bool> healthy_{true};
  ServiceHealthServers servers_;
  proxier::FakeProxier feed_{servers_};  // hands servers_ tables as deltas
};

TEST_F(ServersTest, OpensAnswersAndClosesWithTheTable) {
  const int port = testutil::FreePort();
  ASSERT_TRUE(feed_.Apply(Table({Port(kWeb, "http", port, {Ep("10.0.0.1:80", "node1")})})).ok());
  auto [status, body] = Get(port, "/any/path?x=1");
  EXPECT_EQ(status, 200);
  EXPECT_NE(body.find("\"localEndpoints\": 1,"), std::string::npos) << body;
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("X-Load-Balancing-Endpoint-Weight"), "1");
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");

  healthy_ = false;  // the proxy's own health is read at each request
  EXPECT_EQ(Get(port).first, 503);
  healthy_ = true;

  // The endpoint not ready, then on another node: 503 with 0.
  ASSERT_TRUE(
      feed_.Apply(Table({Port(kWeb, "http", port, {Ep("10.0.0.1:80", "node1", false)})})).ok());
  std::tie(status, body) = Get(port);
  EXPECT_EQ(status, 503);
  EXPECT_NE(body.find("\"localEndpoints\": 0,"), std::string::npos) << body;
  ASSERT_TRUE(feed_.Apply(Table({Port(kWeb, "http", port, {Ep("10.0.0.1:80", "node2")})})).ok());
  EXPECT_EQ(Get(port).first, 503);

  // A new port: the old one closes.
  const int moved = testutil::FreePort();
  ASSERT_TRUE(feed_.Apply(Table({Port(kWeb, "http", moved, {Ep("10.0.0.1:80", "node1")})})).ok());
  EXPECT_EQ(Get(port).first, -1);
  EXPECT_EQ(Get(moved).first, 200);
  // No health check port any more (type or traffic policy changed), then gone.
  ASSERT_TRUE(feed_.Apply(Table({Port(kWeb, "http", 0, {Ep("10.0.0.1:80", "node1")})})).ok());
  EXPECT_EQ(Get(moved).first, -1);
  EXPECT_TRUE(servers_.OpenPorts().empty());
}

TEST_F(ServersTest, ATakenPortIsReportedRetriedAndHoldsNoOneUp) {
  const int taken = testutil::FreePort();
  const int free = testutil::FreePort();
  base::UniqueFd holder(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(taken));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
  ASSERT_EQ(::listen(holder.get(), 1), 0);

  auto web = Port(kWeb, "http", taken, {Ep("10.0.0.1:80", "node1")});
  auto api = Port(kApi, "http", free, {Ep("10.0.0.2:80", "node1")});
  auto table = Table({web, api});
  ASSERT_TRUE(feed_.Apply(table).ok());  // a sync never fails on it
  EXPECT_EQ(Get(free).first, 200);
  EXPECT_EQ(servers_.OpenPorts(), (std::map<config::NamespacedName, int>{{kApi, free}}));
  ASSERT_TRUE(feed_.Apply(table).ok());
  EXPECT_NE(registry_.Render().find(
                "sluice_service_health_check_listen_errors_total{service=\"default/web\"} 2"),
            std::string::npos)
      << registry_.Render();

  holder.Reset();  // the port is free again: the next sync opens it, even one without changes
  ASSERT_TRUE(feed_.Apply(Table({web, api})).ok());
  EXPECT_TRUE(feed_.changes().empty());
  EXPECT_EQ(Get(taken).first, 200);
  EXPECT_EQ(servers_.OpenPorts().size(), 2u);
}

}  // namespace
}  // namespace sluice::admin
