// SPDX-License-Identifier: Apache-2.0
// Conntrack ageing over FakeBpfMap: unprivileged; `now` is driven by the test.
#include "agent/dataplane/extnat/flow_table.h"

#include <netinet/in.h>

#include <cstring>
#include <string>

#include "gtest/gtest.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "agent/dataplane/fastpath/fake_bpf_map.h"

namespace sluice::extnat {
namespace {

using fastpath::FakeBpfMap;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

constexpr FlowTable::Ages kAges = {.tcp_established = absl::Hours(24),
                                   .tcp_close_wait = absl::Hours(1),
                                   .tcp_closed = absl::Seconds(10),
                                   .udp = absl::Seconds(30)};

// A time well past zero, as bpf_ktime_get_ns() reads on a running machine.
const absl::Duration kStart = absl::Hours(1000);

uint64_t Ns(absl::Duration d) { return static_cast<uint64_t>(absl::ToInt64Nanoseconds(d)); }

struct Flow {
  sluice_nat_tuple forward{};
  sluice_nat_tuple reply{};
};

class FlowTableTest : public ::testing::Test {
 protected:
  // Writes both entries of a flow as the program does: forward (client -> front) to the
  // backend, reply (backend -> client) back to the front.
  Flow Add(const std::string& client, const std::string& front, const std::string& backend,
           uint8_t proto, absl::Duration forward_last, absl::Duration reply_last,
           uint32_t flags = 0) {
    const sluice_lb_addr c = socklb::LbAddr(Addr(client));
    const sluice_lb_addr f = socklb::LbAddr(Addr(front));
    const sluice_lb_addr b = socklb::LbAddr(Addr(backend));
    Flow flow;
    std::memcpy(flow.forward.saddr, c.addr, 16);
    std::memcpy(flow.forward.daddr, f.addr, 16);
    flow.forward.sport = c.port;
    flow.forward.dport = f.port;
    flow.forward.proto = proto;
    std::memcpy(flow.reply.saddr, b.addr, 16);
    std::memcpy(flow.reply.daddr, c.addr, 16);
    flow.reply.sport = b.port;
    flow.reply.dport = c.port;
    flow.reply.proto = proto;
    const sluice_nat_ct fwd{.to = b, .id = 1, .flags = flags, .last_ns = Ns(forward_last)};
    const sluice_nat_ct rep{
        .to = f, .id = 1, .flags = flags | SLUICE_NAT_CT_REPLY, .last_ns = Ns(reply_last)};
    EXPECT_TRUE(ct_.Update(&flow.forward, &fwd, BPF_NOEXIST).ok());
    EXPECT_TRUE(ct_.Update(&flow.reply, &rep, BPF_NOEXIST).ok());
    return flow;
  }
  // An SNATed flow: its reply entry is keyed (backend -> node address and port).
  Flow AddSnat(const std::string& client, const std::string& front, const std::string& backend,
               const std::string& node, absl::Duration forward_last, absl::Duration reply_last) {
    const sluice_lb_addr c = socklb::LbAddr(Addr(client));
    const sluice_lb_addr f = socklb::LbAddr(Addr(front));
    const sluice_lb_addr b = socklb::LbAddr(Addr(backend));
    const sluice_lb_addr n = socklb::LbAddr(Addr(node));
    Flow flow;
    std::memcpy(flow.forward.saddr, c.addr, 16);
    std::memcpy(flow.forward.daddr, f.addr, 16);
    flow.forward.sport = c.port;
    flow.forward.dport = f.port;
    flow.forward.proto = IPPROTO_TCP;
    std::memcpy(flow.reply.saddr, b.addr, 16);
    std::memcpy(flow.reply.daddr, n.addr, 16);
    flow.reply.sport = b.port;
    flow.reply.dport = n.port;
    flow.reply.proto = IPPROTO_TCP;
    const sluice_nat_ct fwd{
        .to = b, .nat = n, .id = 1, .flags = SLUICE_NAT_CT_SNAT, .last_ns = Ns(forward_last)};
    const sluice_nat_ct rep{.to = f,
                            .nat = c,
                            .id = 1,
                            .flags = SLUICE_NAT_CT_SNAT | SLUICE_NAT_CT_REPLY,
                            .last_ns = Ns(reply_last)};
    EXPECT_TRUE(ct_.Update(&flow.forward, &fwd, BPF_NOEXIST).ok());
    EXPECT_TRUE(ct_.Update(&flow.reply, &rep, BPF_NOEXIST).ok());
    return flow;
  }
  bool Has(const sluice_nat_tuple& key) { return ct_.Contains(key); }

  FakeBpfMap ct_{"sluice_nat_ct", sizeof(sluice_nat_tuple), sizeof(sluice_nat_ct), 64};
};

// An SNATed flow's two entries pair through its SNAT address: a recent reply keeps the forward
// entry, and both go together once both are idle.
TEST_F(FlowTableTest, SnatFlowsAgeAsOne) {
  FlowTable table(ct_, kAges);
  const Flow busy = AddSnat("198.51.100.7:40000", "203.0.113.10:80", "10.0.1.5:8080",
                            "192.0.2.1:61000", kStart, kStart + absl::Hours(30));
  const Flow idle = AddSnat("198.51.100.7:40001", "203.0.113.10:80", "10.0.1.5:8080",
                            "192.0.2.1:61001", kStart, kStart);
  auto left = table.Collect(kStart + absl::Hours(25));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 2u);
  EXPECT_TRUE(Has(busy.forward));
  EXPECT_TRUE(Has(busy.reply));
  EXPECT_FALSE(Has(idle.forward));
  EXPECT_FALSE(Has(idle.reply));
}

TEST_F(FlowTableTest, TcpFlowsAgeByTheirState) {
  FlowTable table(ct_, kAges);
  const std::string front = "203.0.113.10:80", backend = "10.0.0.1:8080";
  const Flow open = Add("198.51.100.7:40000", front, backend, IPPROTO_TCP, kStart, kStart);
  const Flow client_fin =
      Add("198.51.100.7:40001", front, backend, IPPROTO_TCP, kStart, kStart, SLUICE_NAT_CT_FIN_FWD);
  const Flow backend_fin = Add("198.51.100.7:40002", front, backend, IPPROTO_TCP, kStart, kStart,
                               SLUICE_NAT_CT_FIN_REPLY);
  const Flow both_fins = Add("198.51.100.7:40003", front, backend, IPPROTO_TCP, kStart, kStart,
                             SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY);
  const Flow reset =
      Add("198.51.100.7:40004", front, backend, IPPROTO_TCP, kStart, kStart, SLUICE_NAT_CT_RST);
  // Each entry holding one side's FIN (the program marked them as the FINs passed): closed.
  Flow split = Add("198.51.100.7:40005", front, backend, IPPROTO_TCP, kStart, kStart);
  for (auto [key, bit] : {std::pair{&split.forward, SLUICE_NAT_CT_FIN_FWD},
                          std::pair{&split.reply, SLUICE_NAT_CT_FIN_REPLY}}) {
    sluice_nat_ct v{};
    ASSERT_TRUE(ct_.Lookup(key, &v).ok());
    v.flags |= bit;
    ASSERT_TRUE(ct_.Update(key, &v, BPF_EXIST).ok());
  }

  // Within the closed age: all kept.
  auto left = table.Collect(kStart + absl::Seconds(10));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 12u);
  // Past it: the closed ones go, the half-closed ones stay.
  left = table.Collect(kStart + absl::Seconds(11));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 6u);
  EXPECT_FALSE(Has(both_fins.forward) || Has(both_fins.reply));
  EXPECT_FALSE(Has(reset.forward) || Has(reset.reply));
  EXPECT_FALSE(Has(split.forward) || Has(split.reply));
  EXPECT_TRUE(Has(client_fin.forward) && Has(client_fin.reply));
  EXPECT_TRUE(Has(backend_fin.forward) && Has(backend_fin.reply));
  // Past the close-wait age: the half-closed ones go, not the established one.
  left = table.Collect(kStart + absl::Hours(1) + absl::Seconds(1));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 2u);
  EXPECT_TRUE(Has(open.forward) && Has(open.reply));
  EXPECT_EQ(table.size(), 2u);
  left = table.Collect(kStart + absl::Hours(24) + absl::Seconds(1));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 0u);
  EXPECT_EQ(ct_.size(), 0u);
}

TEST_F(FlowTableTest, AFlowIsKeptWhileEitherDirectionIsActive) {
  FlowTable table(ct_, kAges);
  // Only the backend speaks (a stream to the client): the forward entry alone is idle.
  const Flow one_way = Add("198.51.100.7:5000", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP,
                           kStart, kStart + absl::Seconds(50));
  const Flow quiet = Add("198.51.100.8:5000", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP, kStart,
                         kStart + absl::Seconds(10));
  auto left = table.Collect(kStart + absl::Seconds(60));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 2u);
  EXPECT_TRUE(Has(one_way.forward) && Has(one_way.reply));
  EXPECT_FALSE(Has(quiet.forward) || Has(quiet.reply));  // the pair went together
}

TEST_F(FlowTableTest, AnEntryWithoutItsPartnerAgesAlone) {
  FlowTable table(ct_, kAges);
  const Flow a =
      Add("198.51.100.7:5000", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP, kStart, kStart);
  const Flow b = Add("198.51.100.7:5001", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP,
                     kStart + absl::Seconds(100), kStart + absl::Seconds(100));
  ASSERT_TRUE(ct_.Delete(&a.reply).ok());
  ASSERT_TRUE(ct_.Delete(&b.forward).ok());
  auto left = table.Collect(kStart + absl::Seconds(110));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 1u);
  EXPECT_FALSE(Has(a.forward));
  EXPECT_TRUE(Has(b.reply));  // fresh: kept
}

TEST_F(FlowTableTest, ACollectSeesTheClockOfThePrograms) {
  FlowTable table(ct_, kAges);
  // Written after `now` was read: not idle at all.
  Add("198.51.100.7:5000", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP, kStart + absl::Seconds(1),
      kStart + absl::Seconds(1));
  auto left = table.Collect(kStart);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 2u);
  ct_.FailNext("ForEach", absl::InternalError("walk"));
  EXPECT_FALSE(table.Collect(kStart).ok());
  EXPECT_EQ(table.size(), 2u);
}

TEST_F(FlowTableTest, AProtocolOtherThanTcpAgesAsUdp) {
  FlowTable table(ct_, kAges);
  Add("198.51.100.7:0", "203.0.113.10:0", "10.0.0.5:0", IPPROTO_ICMP, kStart, kStart);
  auto left = table.Collect(kStart + absl::Seconds(31));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 0u);
}

TEST_F(FlowTableTest, UdpFlowsToABackendThatLeftAreForgotten) {
  FlowTable table(ct_, kAges);
  const Flow gone =
      Add("198.51.100.7:5000", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP, kStart, kStart);
  const Flow other =
      Add("198.51.100.7:5001", "203.0.113.10:53", "10.0.0.6:53", IPPROTO_UDP, kStart, kStart);
  auto n = table.Forget({{Addr("203.0.113.10:53"), Addr("10.0.0.5:53")}});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_FALSE(Has(gone.forward) || Has(gone.reply));
  EXPECT_TRUE(Has(other.forward) && Has(other.reply));
}

// Through ExtNat: ages from LoadOptions, the count reported, and a UDP backend leaving a
// service ends its flows.
TEST_F(FlowTableTest, ExtNatCollectsWithItsLoadOptions) {
  FakeBpfMap svc{"sluice_nat_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 8};
  FakeBpfMap slot{"sluice_nat_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 8};
  FakeBpfMap member{"sluice_nat_member", sizeof(sluice_lb_member), 1, 8};
  FakeBpfMap stats{"sluice_nat_stats", sizeof(uint32_t), sizeof(sluice_lb_stats), 8};
  FakeBpfMap ranges{"sluice_nat_range", sizeof(sluice_nat_range), 1, 8};
  FakeBpfMap traffic{"sluice_nat_traffi", sizeof(uint32_t), sizeof(sluice_nat_traffic), 8};
  FakeBpfMap drops{"sluice_nat_drops", sizeof(uint32_t), sizeof(uint64_t), 8};
  FakeBpfMap remote{"sluice_nat_rmt", sizeof(sluice_nat_host), 1, 8};
  FakeBpfMap snat{"sluice_nat_snat", sizeof(uint32_t), sizeof(sluice_nat_ifaddr), 8};
  LoadOptions options;
  options.udp = absl::Seconds(5);
  options.tcp_closed = absl::Seconds(2);
  auto nat =
      ExtNat::ForMaps({.services = {.svc = svc, .slot = slot, .member = member, .stats = stats},
                       .ranges = ranges,
                       .flows = ct_,
                       .traffic = traffic,
                       .drops = drops,
                       .remote = remote,
                       .snat = snat},
                      options);
  Service dns;
  dns.frontends = {{Addr("203.0.113.10:53"), true}};
  dns.backends = {Addr("10.0.0.5:53"), Addr("10.0.0.6:53")};
  ASSERT_TRUE(nat->Apply({{"dns", dns}}).ok());
  const Flow stays =
      Add("198.51.100.7:5000", "203.0.113.10:53", "10.0.0.6:53", IPPROTO_UDP, kStart, kStart);
  const Flow ends =
      Add("198.51.100.7:5001", "203.0.113.10:53", "10.0.0.5:53", IPPROTO_UDP, kStart, kStart);
  const Flow reset = Add("198.51.100.7:5002", "203.0.113.10:53", "10.0.0.6:53", IPPROTO_TCP, kStart,
                         kStart, SLUICE_NAT_CT_RST);
  EXPECT_EQ(nat->flows(), 0u);  // until the first collection
  auto left = nat->CollectFlows(kStart + absl::Seconds(4));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 4u);
  EXPECT_EQ(nat->flows(), 4u);
  EXPECT_FALSE(Has(reset.forward));  // past options.tcp_closed
  dns.backends = {Addr("10.0.0.6:53")};
  ASSERT_TRUE(nat->Apply({{"dns", dns}}).ok());
  EXPECT_FALSE(Has(ends.forward) || Has(ends.reply));
  EXPECT_TRUE(Has(stays.forward));
  left = nat->CollectFlows(kStart + absl::Seconds(6));
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, 0u);
  EXPECT_EQ(nat->flows(), 0u);
}

}  // namespace
}  // namespace sluice::extnat
