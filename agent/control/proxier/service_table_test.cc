// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/service_table.h"

#include "gtest/gtest.h"

namespace sluice::proxier {
namespace {

using config::Endpoint;
using config::EndpointSlice;
using config::Service;

net::IpAddress Ip(const char* s) { return *net::IpAddress::Parse(s); }

Service WebService() {
  Service s;
  s.meta.id = {"default", "web"};
  s.cluster_ips = {Ip("10.96.0.10")};
  config::ServicePort http;
  http.name = "http";
  http.port = 80;
  config::ServicePort dns;
  dns.name = "dns";
  dns.port = 53;
  dns.protocol = config::Protocol::kUdp;
  s.ports = {http, dns};
  return s;
}

Endpoint Ep(const char* ip, std::optional<bool> ready = std::nullopt, const char* node = "",
            std::vector<std::string> hints = {}) {
  Endpoint e;
  e.addresses = {Ip(ip)};
  e.conditions.ready = ready;
  e.node_name = node;
  e.has_hints = !hints.empty();
  e.hint_zones = std::move(hints);
  return e;
}

config::EndpointSlicePtr Slice(std::vector<Endpoint> eps, const char* name = "web-1") {
  auto s = std::make_shared<EndpointSlice>();
  s->meta.id = {"default", name};
  s->service_name = "web";
  s->endpoints = std::move(eps);
  config::EndpointPort http;
  http.name = "http";
  http.port = 8080;
  config::EndpointPort dns;
  dns.name = "dns";
  dns.port = 5353;
  dns.protocol = config::Protocol::kUdp;
  s->ports = {http, dns};
  return s;
}

std::vector<std::string> Strings(const std::vector<net::SocketAddress>& v) {
  std::vector<std::string> out;
  out.reserve(v.size());
  for (const auto& a : v) {
    out.push_back(a.ToString());
  }
  return out;
}
using V = std::vector<std::string>;

TEST(ServiceTableTest, PortsMapByNameAndProtocol) {
  auto ports = BuildServicePorts(WebService(), {Slice({Ep("10.0.0.2"), Ep("10.0.0.1")})}, {});
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_EQ(ports[0]->name.ToString(), "default/web:http");
  EXPECT_EQ(Strings(ports[0]->cluster_endpoints), (V{"10.0.0.1:8080", "10.0.0.2:8080"}));
  EXPECT_EQ(ports[1]->name.protocol, config::Protocol::kUdp);
  EXPECT_EQ(Strings(ports[1]->cluster_endpoints), (V{"10.0.0.1:5353", "10.0.0.2:5353"}));
}

TEST(ServiceTableTest, DuplicatesAcrossSlicesMerge) {
  auto ports = BuildServicePorts(
      WebService(), {Slice({Ep("10.0.0.1")}, "a"), Slice({Ep("10.0.0.1"), Ep("10.0.0.3")}, "b")},
      {});
  EXPECT_EQ(Strings(ports[0]->cluster_endpoints), (V{"10.0.0.1:8080", "10.0.0.3:8080"}));
}

TEST(ServiceTableTest, ReadyFirstThenServingTerminating) {
  Endpoint terminating = Ep("10.0.0.9", false);
  terminating.conditions.serving = true;
  terminating.conditions.terminating = true;
  auto ports = BuildServicePorts(WebService(), {Slice({Ep("10.0.0.1"), terminating})}, {});
  EXPECT_EQ(Strings(ports[0]->cluster_endpoints), (V{"10.0.0.1:8080"}));
  ports = BuildServicePorts(WebService(), {Slice({Ep("10.0.0.1", false), terminating})}, {});
  EXPECT_EQ(Strings(ports[0]->cluster_endpoints), (V{"10.0.0.9:8080"}));
  Endpoint not_serving = terminating;
  not_serving.conditions.serving = false;
  ports = BuildServicePorts(WebService(), {Slice({not_serving})}, {});
  EXPECT_TRUE(ports[0]->cluster_endpoints.empty());
}

TEST(ServiceTableTest, TrafficPolicyLocal) {
  Service svc = WebService();
  svc.internal_traffic_policy = config::TrafficPolicy::kLocal;
  NodeInfo node{.name = "n1"};
  auto ports =
      BuildServicePorts(svc, {Slice({Ep("10.0.0.1", {}, "n1"), Ep("10.0.0.2", {}, "n2")})}, node);
  EXPECT_EQ(Strings(ports[0]->cluster_endpoints), (V{"10.0.0.1:8080"}));
  EXPECT_EQ(Strings(ports[0]->external_endpoints), (V{"10.0.0.1:8080", "10.0.0.2:8080"}));
  svc.internal_traffic_policy = config::TrafficPolicy::kCluster;
  svc.external_traffic_policy = config::TrafficPolicy::kLocal;
  ports = BuildServicePorts(svc, {Slice({Ep("10.0.0.2", {}, "n2")})}, node);
  EXPECT_EQ(ports[0]->cluster_endpoints.size(), 1u);
  EXPECT_TRUE(ports[0]->external_endpoints.empty());  // no local endpoint: refuse
}

TEST(ServiceTableTest, TopologyHints) {
  NodeInfo node{.name = "n1", .zone = "z1"};
  auto hinted = Slice({Ep("10.0.0.1", {}, "", {"z1"}), Ep("10.0.0.2", {}, "", {"z2"})});
  EXPECT_EQ(Strings(BuildServicePorts(WebService(), {hinted}, node)[0]->cluster_endpoints),
            (V{"10.0.0.1:8080"}));
  // Not every endpoint hinted: hints are ignored.
  auto partial = Slice({Ep("10.0.0.1", {}, "", {"z1"}), Ep("10.0.0.2")});
  EXPECT_EQ(BuildServicePorts(WebService(), {partial}, node)[0]->cluster_endpoints.size(), 2u);
  // Unknown zone: all endpoints.
  EXPECT_EQ(BuildServicePorts(WebService(), {hinted}, {})[0]->cluster_endpoints.size(), 2u);
}

TEST(ServiceTableTest, FqdnSlicesIgnored) {
  auto slice = Slice({Ep("10.0.0.1")});
  auto fqdn = std::make_shared<EndpointSlice>(*slice);
  fqdn->address_type = config::AddressType::kFqdn;
  EXPECT_TRUE(BuildServicePorts(WebService(), {fqdn}, {})[0]->endpoints.empty());
}

TEST(ServiceTableTest, WhichServicesAreProgrammed) {
  Service svc = WebService();
  EXPECT_TRUE(ShouldProgram(svc, {}));
  Service headless = svc;
  headless.headless = true;
  headless.cluster_ips.clear();
  EXPECT_FALSE(ShouldProgram(headless, {}));
  Service external = svc;
  external.type = config::ServiceType::kExternalName;
  EXPECT_FALSE(ShouldProgram(external, {}));
  Service other = svc;
  other.meta.labels[config::kServiceProxyNameLabel] = "other";
  EXPECT_FALSE(ShouldProgram(other, {}));
  EXPECT_FALSE(ShouldProgram(other, NodeInfo{.service_proxy_name = "sluice"}));
  EXPECT_TRUE(ShouldProgram(other, NodeInfo{.service_proxy_name = "other"}));
  EXPECT_FALSE(ShouldProgram(svc, NodeInfo{.service_proxy_name = "other"}));
}

// The LoadBalancer IPs and their source ranges (per family, normalised) reach every port; the
// health check node port only where the API server would allocate it (LoadBalancer, eTP Local).
TEST(ServiceTableTest, LoadBalancerFieldsPerPort) {
  Service s = WebService();
  s.type = config::ServiceType::kLoadBalancer;
  s.external_ips = {Ip("192.0.2.1")};
  s.load_balancer_ingress = {Ip("203.0.113.7"), Ip("2001:db8::7")};
  s.load_balancer_source_ranges = {"10.0.0.1/8", "2001:db8::/32"};
  s.health_check_node_port = 32100;
  s.external_traffic_policy = config::TrafficPolicy::kLocal;
  auto ports = BuildServicePorts(s, {Slice({Ep("10.0.0.1")})}, NodeInfo{});
  ASSERT_EQ(ports.size(), 2u);
  for (const auto& p : ports) {
    EXPECT_EQ(p->load_balancer_ips, s.load_balancer_ingress);
    EXPECT_EQ(p->health_check_node_port, 32100);
    ASSERT_EQ(p->source_ranges.size(), 2u);
    EXPECT_EQ(p->source_ranges[0].ToString(), "10.0.0.0/8");
  }
  const ServicePortInfo& p = *ports[0];
  EXPECT_EQ(SourceRangesFor(p, Ip("203.0.113.7")).size(), 1u);
  EXPECT_EQ(SourceRangesFor(p, Ip("203.0.113.7"))[0].ToString(), "10.0.0.0/8");
  EXPECT_EQ(SourceRangesFor(p, Ip("2001:db8::7"))[0].ToString(), "2001:db8::/32");
  EXPECT_TRUE(SourceRangesFor(p, Ip("192.0.2.1")).empty()) << "externalIPs are not guarded";
  EXPECT_TRUE(SourceRangesFor(p, Ip("10.96.0.10")).empty());

  s.load_balancer_source_ranges = {"2001:db8::/32"};
  EXPECT_TRUE(SourceRangesFor(*BuildServicePorts(s, {}, NodeInfo{})[0], Ip("203.0.113.7")).empty())
      << "a family without ranges is open, as in kube-proxy's per-family proxiers";

  s.external_traffic_policy = config::TrafficPolicy::kCluster;
  EXPECT_EQ(BuildServicePorts(s, {}, NodeInfo{})[0]->health_check_node_port, 0);
  s.external_traffic_policy = config::TrafficPolicy::kLocal;
  s.type = config::ServiceType::kNodePort;
  EXPECT_EQ(BuildServicePorts(s, {}, NodeInfo{})[0]->health_check_node_port, 0);
}

}  // namespace
}  // namespace sluice::proxier
