// SPDX-License-Identifier: Apache-2.0
// SocketBalancing over SocketLb::ForMaps with FakeBpfMap: what each service port becomes in the
// socket-LB maps, unprivileged.
#include "agent/control/proxier/socket_balancing.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/control/proxier/fake_proxier.h"
#include "agent/dataplane/fastpath/fake_bpf_map.h"

namespace sluice::proxier {
namespace {

using fastpath::FakeBpfMap;
using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

net::IpAddress Ip(const char* text) { return *net::IpAddress::Parse(text); }
net::SocketAddress Addr(const char* text) { return *net::SocketAddress::Parse(text); }

ServicePortInfoPtr Port(const char* name, std::vector<net::IpAddress> cluster_ips,
                        std::vector<net::SocketAddress> endpoints,
                        config::Protocol protocol = config::Protocol::kTcp) {
  auto info = std::make_shared<ServicePortInfo>();
  info->name = ServicePortName{{"ns", name}, "p", protocol};
  info->port = 80;
  info->cluster_ips = std::move(cluster_ips);
  info->cluster_endpoints = endpoints;
  info->external_endpoints = std::move(endpoints);
  return info;
}

std::shared_ptr<const ServiceTable> Table(const std::vector<ServicePortInfoPtr>& ports) {
  std::map<ServicePortName, ServicePortInfoPtr> map;
  for (const auto& p : ports) {
    map.emplace(p->name, p);
  }
  return std::make_shared<const ServiceTable>(std::move(map));
}

class SocketBalancingTest : public ::testing::Test {
 protected:
  socklb::ServiceMaps::Maps maps() {
    return {.svc = svc_, .slot = slot_, .member = member_, .stats = stats_};
  }
  SocketBalancing& sb() {
    if (sb_ == nullptr) {
      lb_ = socklb::SocketLb::ForMaps(maps());
      sb_ = std::make_unique<SocketBalancing>(
          *lb_,
          SocketBalancing::Options{.node_ips = [this] { return node_ips_; }, .node_name = "node1"});
    }
    return *sb_;
  }
  // Hands tables to sb() as deltas, as the Proxier does.
  FakeProxier& feed() {
    if (feed_ == nullptr) {
      feed_ = std::make_unique<FakeProxier>(sb());
    }
    return *feed_;
  }

  FakeBpfMap svc_{"sluice_lb_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 64};
  FakeBpfMap slot_{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 64};
  FakeBpfMap member_{"sluice_lb_member", sizeof(sluice_lb_member), 1, 64};
  FakeBpfMap stats_{"sluice_lb_stats", sizeof(uint32_t), sizeof(sluice_lb_stats), 64};
  std::vector<net::IpAddress> node_ips_;
  std::unique_ptr<socklb::SocketLb> lb_;
  std::unique_ptr<SocketBalancing> sb_;
  std::unique_ptr<FakeProxier> feed_;
};

TEST_F(SocketBalancingTest, EachFamilyGetsItsOwnFrontendsAndBackends) {
  ASSERT_TRUE(feed()
                  .Apply(Table({Port("web", {Ip("10.96.0.10"), Ip("fd00::10")},
                                     {Addr("10.0.0.1:8080"), Addr("[fd00::1]:8080")})}))
                  .ok());
  EXPECT_THAT(lb_->Frontends(), ElementsAre(Pair("ns/web:p#c4", ElementsAre("tcp/10.96.0.10:80")),
                                            Pair("ns/web:p#c6", ElementsAre("tcp/[fd00::10]:80"))));
  EXPECT_THAT(sb().Frontends(),
              ElementsAre(Pair("ns/web:p", ElementsAre("tcp/10.96.0.10:80", "tcp/[fd00::10]:80"))));
  EXPECT_EQ(slot_.size(), 2u);  // one backend per family
}

TEST_F(SocketBalancingTest, AFamilyWithoutItsOwnEndpointsIsLeftToTheProxy) {
  ASSERT_TRUE(
      feed()
          .Apply(Table({Port("web", {Ip("10.96.0.10"), Ip("fd00::10")}, {Addr("10.0.0.1:8080")})}))
          .ok());
  EXPECT_THAT(lb_->Frontends(), ElementsAre(Pair("ns/web:p#c4", ElementsAre("tcp/10.96.0.10:80"))));
}

TEST_F(SocketBalancingTest, NodePortsOnNodeAddressesAndGuardedLoadBalancerIpsLeftToTheProxy) {
  node_ips_ = {Ip("192.0.2.1")};
  auto info =
      std::make_shared<ServicePortInfo>(*Port("web", {Ip("10.96.0.10")}, {Addr("10.0.0.1:8080")}));
  info->node_port = 30080;
  info->external_ips = {Ip("198.51.100.1"), Ip("198.51.100.2")};
  info->load_balancer_ips = {Ip("198.51.100.2")};
  info->source_ranges = {*net::Cidr::Parse("203.0.113.0/24")};
  ASSERT_TRUE(feed().Apply(Table({info})).ok());
  EXPECT_THAT(lb_->Frontends()["ns/web:p#e4"],
              UnorderedElementsAre("tcp/198.51.100.1:80", "tcp/192.0.2.1:30080"));
}

TEST_F(SocketBalancingTest, UdpAndRemoval) {
  auto dns = Port("dns", {Ip("10.96.0.10")}, {Addr("10.0.0.1:53")}, config::Protocol::kUdp);
  auto web = Port("web", {Ip("10.96.0.11")}, {Addr("10.0.0.1:80")});
  ASSERT_TRUE(feed().Apply(Table({dns, web})).ok());
  EXPECT_THAT(lb_->Frontends()["ns/dns:p#c4"], ElementsAre("udp/10.96.0.10:80"));
  ASSERT_TRUE(feed().Apply(Table({web})).ok());
  EXPECT_THAT(sb().Frontends(), ElementsAre(Pair("ns/web:p", ElementsAre("tcp/10.96.0.11:80"))));
  EXPECT_EQ(svc_.size(), 1u);
}

// Maps an earlier agent left (pinned, adopted): the first sync is complete and removes what it
// does not program.
TEST_F(SocketBalancingTest, TheFirstSyncSweepsAnEarlierAgentsEntries) {
  {
    socklb::ServiceMaps earlier(maps());
    std::vector<socklb::Gone> gone;
    ASSERT_TRUE(earlier
                    .Apply({{"ns/old:p#c4", socklb::Service{.frontends = {{Addr("10.96.0.99:80")}},
                                                            .backends = {Addr("10.0.0.9:80")}}}},
                           gone)
                    .ok());
    const uint32_t id = earlier.Ids().begin()->second;
    const sluice_lb_stats zero{};  // as the program creates them at the first connect
    ASSERT_TRUE(stats_.Update(&id, &zero, BPF_NOEXIST).ok());
  }
  ASSERT_TRUE(feed().Apply(Table({Port("web", {Ip("10.96.0.10")}, {Addr("10.0.0.1:8080")})})).ok());
  EXPECT_EQ(svc_.size(), 1u);
  EXPECT_EQ(slot_.size(), 1u);
  EXPECT_EQ(stats_.size(), 0u);
  EXPECT_THAT(sb().Frontends(), ElementsAre(Pair("ns/web:p", ElementsAre("tcp/10.96.0.10:80"))));
}

TEST_F(SocketBalancingTest, NoEndpointsRefuses) {
  ASSERT_TRUE(feed().Apply(Table({Port("web", {Ip("10.96.0.10")}, {})})).ok());
  EXPECT_THAT(lb_->Frontends(), ElementsAre(Pair("ns/web:p#c4", ElementsAre("tcp/10.96.0.10:80"))));
  EXPECT_EQ(slot_.size(), 0u);
  EXPECT_THAT(sb().Counters(), ElementsAre(Pair("ns/web:p", ::testing::_)));
}

}  // namespace
}  // namespace sluice::proxier
