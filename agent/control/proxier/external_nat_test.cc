// SPDX-License-Identifier: Apache-2.0
// ExternalNatChanges: what each service port becomes for the eBPF NAT of remote clients.
#include "agent/control/proxier/external_nat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::proxier {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

net::IpAddress Ip(const char* text) { return *net::IpAddress::Parse(text); }
net::SocketAddress Addr(const char* text) { return *net::SocketAddress::Parse(text); }
net::Cidr Cidr(const char* text) { return *net::Cidr::Parse(text); }

// Endpoints (address, node): the external ones are all of them, as eTP Cluster selects.
ServicePortInfo Port(std::vector<std::pair<const char*, const char*>> endpoints,
                     config::Protocol protocol = config::Protocol::kTcp) {
  ServicePortInfo info;
  info.name = ServicePortName{{"ns", "web"}, "p", protocol};
  info.port = 80;
  info.cluster_ips = {Ip("10.96.0.10")};
  info.external_ips = {Ip("198.51.100.1")};
  for (const auto& [address, node] : endpoints) {
    info.endpoints.push_back({.address = Addr(address), .node_name = node});
    info.external_endpoints.push_back(Addr(address));
  }
  return info;
}

std::vector<std::string> Frontends(const extnat::Service& svc) {
  std::vector<std::string> out;
  for (const auto& f : svc.frontends) {
    out.push_back(absl::StrCat(f.udp ? "udp/" : "tcp/", f.address.ToString()));
  }
  return out;
}

class ExternalNatChangesTest : public ::testing::Test {
 protected:
  // The changes of `info` by name.
  std::map<std::string, std::optional<extnat::Service>> Build(const ServicePortInfo* info) {
    std::vector<extnat::Change> out;
    ExternalNatChanges(ServicePortName{{"ns", "web"}, "p", protocol_}, info, context_, out);
    std::map<std::string, std::optional<extnat::Service>> by_name;
    for (auto& [name, svc] : out) {
      EXPECT_TRUE(by_name.emplace(name, std::move(svc)).second) << name;
    }
    return by_name;
  }

  config::Protocol protocol_ = config::Protocol::kTcp;
  ExternalNatContext context_{.node_name = "node1", .node_ips = {Ip("192.0.2.1")}};
};

TEST_F(ExternalNatChangesTest, LocalPolicyServesItsLocalEndpointsOnExternalIpsAndNodePorts) {
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.2:8080", "node1"}});
  info.external_policy = config::TrafficPolicy::kLocal;
  info.node_port = 30080;
  auto changes = Build(&info);
  ASSERT_EQ(changes.size(), 2u);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  const extnat::Service& v4 = *changes["ns/web:p#4"];
  // The ClusterIP is not a frontend: remote clients do not reach it through this node.
  EXPECT_THAT(Frontends(v4), UnorderedElementsAre("tcp/198.51.100.1:80", "tcp/192.0.2.1:30080"));
  EXPECT_THAT(v4.backends, UnorderedElementsAre(Addr("10.0.0.1:8080"), Addr("10.0.0.2:8080")));
  EXPECT_THAT(v4.source_ranges, IsEmpty());
  EXPECT_EQ(v4.affinity, absl::ZeroDuration());
  EXPECT_FALSE(v4.random);
  EXPECT_FALSE(changes["ns/web:p#6"].has_value());  // no IPv6 frontend
}

TEST_F(ExternalNatChangesTest, LocalPolicyWithoutALocalEndpointIsLeftToTheProxy) {
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node2"}});
  info.external_policy = config::TrafficPolicy::kLocal;
  info.external_endpoints.clear();  // what the service table selects for eTP Local here
  info.node_port = 30080;
  auto changes = Build(&info);
  EXPECT_FALSE(changes["ns/web:p#4"].has_value());
  EXPECT_FALSE(changes["ns/web:p#6"].has_value());
}

TEST_F(ExternalNatChangesTest, ClusterPolicyIsServedOnlyWhenEveryEndpointIsLocal) {
  ServicePortInfo local = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.2:8080", "node1"}});
  EXPECT_TRUE(Build(&local)["ns/web:p#4"].has_value());
  // One remote backend: without SNAT its replies would bypass this node, so the proxy serves.
  ServicePortInfo mixed = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.3:8080", "node2"}});
  EXPECT_FALSE(Build(&mixed)["ns/web:p#4"].has_value());
  // An endpoint without a node name is not known to be local.
  ServicePortInfo unknown = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.4:8080", ""}});
  EXPECT_FALSE(Build(&unknown)["ns/web:p#4"].has_value());
}

TEST_F(ExternalNatChangesTest, NoEndpointIsLeftToTheProxyWhichRefuses) {
  ServicePortInfo info = Port({});
  EXPECT_FALSE(Build(&info)["ns/web:p#4"].has_value());
}

TEST_F(ExternalNatChangesTest, SourceRangesGuardOnlyLoadBalancerIps) {
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}});
  info.node_port = 30080;
  info.external_ips = {Ip("198.51.100.1"), Ip("198.51.100.2")};
  info.load_balancer_ips = {Ip("198.51.100.2")};
  info.source_ranges = {Cidr("203.0.113.0/24"), Cidr("2001:db8::/32")};
  auto changes = Build(&info);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  const extnat::Service& v4 = *changes["ns/web:p#4"];
  EXPECT_THAT(Frontends(v4), UnorderedElementsAre("tcp/198.51.100.1:80", "tcp/198.51.100.2:80",
                                                  "tcp/192.0.2.1:30080"));
  // The external IP and the NodePort take every source; the LB IP its family's ranges.
  EXPECT_THAT(v4.source_ranges,
              ElementsAre(Pair(Ip("198.51.100.2"), ElementsAre(Cidr("203.0.113.0/24")))));
}

TEST_F(ExternalNatChangesTest, EachFamilyGetsItsOwnFrontendsAndBackends) {
  context_.node_ips = {Ip("192.0.2.1"), Ip("2001:db8::1"), Ip("127.0.0.1"), Ip("::1")};
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}, {"[fd00::1]:8080", "node1"}});
  info.node_port = 30080;
  info.external_ips = {Ip("198.51.100.1"), Ip("2001:db8:1::1")};
  auto changes = Build(&info);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  ASSERT_TRUE(changes["ns/web:p#6"].has_value());
  // Loopback node addresses are never reached from another machine.
  EXPECT_THAT(Frontends(*changes["ns/web:p#4"]),
              UnorderedElementsAre("tcp/198.51.100.1:80", "tcp/192.0.2.1:30080"));
  EXPECT_THAT(changes["ns/web:p#4"]->backends, ElementsAre(Addr("10.0.0.1:8080")));
  EXPECT_THAT(Frontends(*changes["ns/web:p#6"]),
              UnorderedElementsAre("tcp/[2001:db8:1::1]:80", "tcp/[2001:db8::1]:30080"));
  EXPECT_THAT(changes["ns/web:p#6"]->backends, ElementsAre(Addr("[fd00::1]:8080")));
}

TEST_F(ExternalNatChangesTest, AFamilyWithoutItsOwnEndpointsIsLeftToTheProxy) {
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}});
  info.external_ips = {Ip("198.51.100.1"), Ip("2001:db8:1::1")};
  auto changes = Build(&info);
  EXPECT_TRUE(changes["ns/web:p#4"].has_value());
  EXPECT_FALSE(changes["ns/web:p#6"].has_value());
}

TEST_F(ExternalNatChangesTest, NodePortsFollowTheNodeAddressesGiven) {
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}});
  info.external_ips.clear();
  info.node_port = 30080;
  context_.node_ips = {};
  EXPECT_FALSE(Build(&info)["ns/web:p#4"].has_value());  // no frontend at all
  context_.node_ips = {Ip("192.0.2.1"), Ip("192.0.2.7")};
  auto changes = Build(&info);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  EXPECT_THAT(Frontends(*changes["ns/web:p#4"]),
              UnorderedElementsAre("tcp/192.0.2.1:30080", "tcp/192.0.2.7:30080"));
}

TEST_F(ExternalNatChangesTest, AffinityAlgorithmAndUdp) {
  protocol_ = config::Protocol::kUdp;
  ServicePortInfo info = Port({{"10.0.0.1:53", "node1"}}, config::Protocol::kUdp);
  info.client_ip_affinity = true;
  info.affinity_timeout = absl::Seconds(600);
  context_.random = true;
  auto changes = Build(&info);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  EXPECT_THAT(Frontends(*changes["ns/web:p#4"]), ElementsAre("udp/198.51.100.1:80"));
  EXPECT_EQ(changes["ns/web:p#4"]->affinity, absl::Seconds(600));
  EXPECT_TRUE(changes["ns/web:p#4"]->random);
}

TEST_F(ExternalNatChangesTest, RemovalAndSctpRemoveBothFamilies) {
  EXPECT_THAT(Build(nullptr),
              ElementsAre(Pair("ns/web:p#4", std::nullopt), Pair("ns/web:p#6", std::nullopt)));
  protocol_ = config::Protocol::kSctp;
  ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}}, config::Protocol::kSctp);
  EXPECT_THAT(Build(&info),
              ElementsAre(Pair("ns/web:p#4", std::nullopt), Pair("ns/web:p#6", std::nullopt)));
}

TEST_F(ExternalNatChangesTest, BackendOrderIsStableAcrossSyncs) {
  ServicePortInfo info = Port({{"10.0.0.1:80", "node1"},
                               {"10.0.0.2:80", "node1"},
                               {"10.0.0.3:80", "node1"},
                               {"10.0.0.4:80", "node1"}});
  auto first = Build(&info);
  auto second = Build(&info);
  EXPECT_EQ(first, second);  // an unchanged port is not rewritten
}

}  // namespace
}  // namespace sluice::proxier
