// SPDX-License-Identifier: Apache-2.0
// ExternalNatChanges: what each service port becomes for the eBPF NAT of remote clients; and
// ExternalNat over ExtNat::ForMaps with FakeBpfMap: which syncs re-read the node, unprivileged.
#include "agent/control/proxier/external_nat.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/control/proxier/fake_proxier.h"
#include "agent/dataplane/fastpath/fake_bpf_map.h"

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
  // As the service table sorts them.
  std::sort(info.endpoints.begin(), info.endpoints.end(),
            [](const EndpointInfo& a, const EndpointInfo& b) { return a.address < b.address; });
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

TEST_F(ExternalNatChangesTest, ClusterPolicyListsRemoteEndpointsForSnat) {
  ServicePortInfo local = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.2:8080", "node1"}});
  ASSERT_TRUE(Build(&local)["ns/web:p#4"].has_value());
  EXPECT_THAT(Build(&local)["ns/web:p#4"]->remote, IsEmpty());
  // A backend on another node is served, SNATed so that its replies come back here.
  ServicePortInfo mixed =
      Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.3:8080", "node2"}, {"10.0.0.3:8081", "node2"}});
  auto changes = Build(&mixed);
  ASSERT_TRUE(changes["ns/web:p#4"].has_value());
  EXPECT_THAT(
      changes["ns/web:p#4"]->backends,
      UnorderedElementsAre(Addr("10.0.0.1:8080"), Addr("10.0.0.3:8080"), Addr("10.0.0.3:8081")));
  EXPECT_THAT(changes["ns/web:p#4"]->remote, ElementsAre(Ip("10.0.0.3")));
  // An endpoint without a node name is not known to be local: SNATed (a local one then finds
  // no SNAT address on its pod-facing link, and the program leaves its flows to the proxy).
  ServicePortInfo unknown = Port({{"10.0.0.1:8080", "node1"}, {"10.0.0.4:8080", ""}});
  EXPECT_THAT(Build(&unknown)["ns/web:p#4"]->remote, ElementsAre(Ip("10.0.0.4")));
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

// The default devices: those holding a selected node address, not veths and bridges (pod-facing
// links), not our VIPs' link, not by link-local addresses alone.
TEST(SelectNodeDevicesTest, NodeAddressesOnLinksThatAreNotPodFacing) {
  const std::vector<NodeLink> links = {
      {"eth0", "virtio_net", {Ip("192.0.2.1"), Ip("fe80::1")}},
      {"cni0", "bridge", {Ip("10.244.0.1")}},
      {"docker0", "bridge", {Ip("172.17.0.1")}},
      {"veth12ab", "veth", {Ip("10.244.0.7")}},
      {"sluice0", "dummy", {Ip("10.96.0.10")}},  // our VIPs
      {"eth1", "", {Ip("198.51.100.1")}},        // driver unknown: kept
      {"eth2", "mlx5_core", {Ip("fe80::2")}},    // link-local only
      {"bond0", "bonding", {Ip("2001:db8::1")}},
  };
  const absl::flat_hash_set<net::IpAddress> vips = {Ip("10.96.0.10")};
  EXPECT_THAT(SelectNodeDevices(links, {}, vips), ElementsAre("bond0", "eth0", "eth1"));
  EXPECT_THAT(SelectNodeDevices(links, {*net::Cidr::Parse("198.51.100.0/24")}, vips),
              ElementsAre("eth1"));
  // A bridge or a veth holding a selected address is still left out (--external-devices).
  EXPECT_THAT(SelectNodeDevices(links, {*net::Cidr::Parse("10.0.0.0/8")}, vips), IsEmpty());
  EXPECT_THAT(SelectNodeDevices(links, {*net::Cidr::Parse("10.96.0.0/12")}, {}),
              ElementsAre("sluice0"));
}

// ExternalNat itself: full syncs (the first two, Invalidate()) re-read the node's addresses and
// devices; a delta sync programs the changed ports only.
class ExternalNatTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kCpus = 2;
  ExternalNatTest()
      : nat_(extnat::ExtNat::ForMaps(
            {.services = {.svc = svc_, .slot = slot_, .member = member_, .stats = stats_},
             .ranges = ranges_,
             .flows = ct_,
             .traffic = traffic_,
             .drops = drops_,
             .remote = remote_,
             .snat = snat_},
            extnat::LoadOptions{})),
        consumer_(*nat_, {.node_ips = [this] { return node_ips_; },
                          .devices = [this] { return devices_; },
                          .node_name = "node1"}),
        feed_(consumer_) {}

  static ServicePortInfoPtr NodePort(const char* name, int node_port) {
    ServicePortInfo info = Port({{"10.0.0.1:8080", "node1"}});
    info.name.service.name = name;
    info.external_ips.clear();
    info.node_port = node_port;
    return std::make_shared<const ServicePortInfo>(std::move(info));
  }
  static std::shared_ptr<const ServiceTable> Table(const std::vector<ServicePortInfoPtr>& ports) {
    std::map<ServicePortName, ServicePortInfoPtr> map;
    for (const auto& p : ports) {
      map.emplace(p->name, p);
    }
    return std::make_shared<const ServiceTable>(std::move(map));
  }

  fastpath::FakeBpfMap svc_{"sluice_nat_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 64};
  fastpath::FakeBpfMap slot_{"sluice_nat_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 64};
  fastpath::FakeBpfMap member_{"sluice_nat_member", sizeof(sluice_lb_member), 1, 64};
  fastpath::FakeBpfMap stats_{"sluice_nat_stats", sizeof(uint32_t), kCpus * sizeof(sluice_lb_stats),
                              64};
  fastpath::FakeBpfMap ranges_{"sluice_nat_range", sizeof(sluice_nat_range), 1, 64};
  fastpath::FakeBpfMap ct_{"sluice_nat_ct", sizeof(sluice_nat_tuple), sizeof(sluice_nat_ct), 64};
  fastpath::FakeBpfMap traffic_{"sluice_nat_traffi", sizeof(uint32_t),
                                kCpus * sizeof(sluice_nat_traffic), 64};
  fastpath::FakeBpfMap drops_{"sluice_nat_drops", sizeof(uint32_t), kCpus * sizeof(uint64_t), 64};
  fastpath::FakeBpfMap remote_{"sluice_nat_rmt", sizeof(sluice_nat_host), 1, 64};
  fastpath::FakeBpfMap snat_{"sluice_nat_snat", sizeof(uint32_t), sizeof(sluice_nat_ifaddr), 64};
  std::vector<net::IpAddress> node_ips_ = {Ip("192.0.2.1")};
  std::vector<std::string> devices_ = {"eth0"};
  std::unique_ptr<extnat::ExtNat> nat_;
  ExternalNat consumer_;
  FakeProxier feed_;
};

TEST_F(ExternalNatTest, FullSyncsRereadTheNodeAndDeltasTouchOnlyTheChangedPorts) {
  auto a = NodePort("a", 30080);
  auto b = NodePort("b", 30081);
  ASSERT_TRUE(feed_.Apply(Table({a, b})).ok());  // full: the first
  EXPECT_THAT(nat_->Devices(), ElementsAre("eth0"));
  EXPECT_THAT(consumer_.Frontends(),
              ElementsAre(Pair("ns/a:p", ElementsAre("tcp/192.0.2.1:30080")),
                          Pair("ns/b:p", ElementsAre("tcp/192.0.2.1:30081"))));
  ASSERT_TRUE(feed_.Apply(Table({a, b})).ok());  // full: the second
  // A new address and device: a delta sync programs the changed port with the addresses the
  // last full sync read, and leaves the other alone.
  node_ips_ = {Ip("192.0.2.7")};
  devices_ = {"eth0", "eth1"};
  auto b2 = NodePort("b", 30082);
  ASSERT_TRUE(feed_.Apply(Table({a, b2})).ok());
  EXPECT_THAT(nat_->Devices(), ElementsAre("eth0"));
  EXPECT_THAT(consumer_.Frontends(),
              ElementsAre(Pair("ns/a:p", ElementsAre("tcp/192.0.2.1:30080")),
                          Pair("ns/b:p", ElementsAre("tcp/192.0.2.1:30082"))));
  // A link or address change: the next apply is full, whatever the Proxier says.
  consumer_.Invalidate();
  auto a2 = NodePort("a", 30083);
  ASSERT_TRUE(feed_.Apply(Table({a2, b2})).ok());
  EXPECT_THAT(nat_->Devices(), ElementsAre("eth0", "eth1"));
  EXPECT_THAT(consumer_.Frontends(),
              ElementsAre(Pair("ns/a:p", ElementsAre("tcp/192.0.2.7:30083")),
                          Pair("ns/b:p", ElementsAre("tcp/192.0.2.7:30082"))));
  // Removal: the port's two names go.
  ASSERT_TRUE(feed_.Apply(Table({b2})).ok());
  EXPECT_THAT(consumer_.Frontends(),
              ElementsAre(Pair("ns/b:p", ElementsAre("tcp/192.0.2.7:30082"))));
  EXPECT_THAT(consumer_.Counters(), ElementsAre(Pair("ns/b:p", ::testing::_)));
}

}  // namespace
}  // namespace sluice::proxier
