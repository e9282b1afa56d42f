// SPDX-License-Identifier: Apache-2.0
// ExtNat's programming of the external-NAT maps over FakeBpfMap: unprivileged. The socket-LB
// rules it shares are tested in socklb/service_maps_test.cc; what the programs do with the
// entries, on the kernel (SelfTest).
#include "agent/dataplane/extnat/ext_nat.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/dataplane/fastpath/fake_bpf_map.h"

namespace sluice::extnat {
namespace {

using fastpath::FakeBpfMap;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint32_t kCpus = 2;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }
net::Cidr Range(const std::string& s) { return *net::Cidr::Parse(s); }

sluice_nat_host Host(const net::SocketAddress& a) {
  sluice_nat_host h{};
  std::memcpy(h.addr, socklb::LbAddr(a).addr, sizeof(h.addr));
  return h;
}

sluice_lb_key Front(const std::string& front, bool udp = false) {
  const sluice_lb_addr a = socklb::LbAddr(Addr(front));
  sluice_lb_key key{};
  std::memcpy(key.addr, a.addr, sizeof(key.addr));
  key.port = a.port;
  key.proto = udp ? IPPROTO_UDP : IPPROTO_TCP;
  return key;
}

// The trie key of `front`'s guard, or of one of its ranges.
sluice_nat_range RangeKey(const std::string& front, const std::optional<std::string>& range = {}) {
  sluice_nat_range key{.prefixlen = 160, .front = Front(front)};
  if (range) {
    const net::Cidr c = Range(*range);
    const sluice_lb_addr a = socklb::LbAddr(net::SocketAddress(c.base(), 0));
    std::memcpy(key.addr, a.addr, sizeof(key.addr));
    key.prefixlen += (c.base().is_v4() ? 96 : 0) + c.prefix();
  }
  return key;
}

// A LoadBalancer service: NodePort on the node, the LB IP guarded by `ranges`.
Service Lb(std::vector<std::string> ranges, std::vector<std::string> backends = {"10.0.0.1:80"}) {
  Service s;
  s.frontends = {{Addr("192.0.2.1:30080"), false}, {Addr("203.0.113.10:80"), false}};
  for (const auto& b : backends) {
    s.backends.push_back(Addr(b));
  }
  for (const auto& r : ranges) {
    s.source_ranges[Addr("203.0.113.10:80").ip()].push_back(Range(r));
  }
  return s;
}

class ExtNatTest : public ::testing::Test {
 protected:
  ExtNat::Maps maps() {
    return {.services = {.svc = svc_, .slot = slot_, .member = member_, .stats = stats_},
            .ranges = ranges_,
            .flows = ct_,
            .traffic = traffic_,
            .drops = drops_,
            .remote = remote_,
            .snat = snat_};
  }
  std::unique_ptr<ExtNat> Make() { return ExtNat::ForMaps(maps(), LoadOptions{}); }
  bool Served(const std::string& front) { return svc_.Contains(Front(front)); }
  std::optional<uint8_t> Trie(const sluice_nat_range& key) {
    uint8_t v;
    return ranges_.Lookup(&key, &v).ok() ? std::optional(v) : std::nullopt;
  }
  // Checks after every write to the service or range maps that the LB IP is never served
  // without its guard, as a packet arriving between any two writes would see them.
  void WatchTheGuard() {
    for (FakeBpfMap* m : {&svc_, &ranges_}) {
      m->on_write = [this] {
        ++checked_;
        if (Served("203.0.113.10:80")) {
          EXPECT_EQ(Trie(RangeKey("203.0.113.10:80")), 0) << "after write " << checked_;
        }
      };
    }
  }

  FakeBpfMap svc_{"sluice_nat_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 64};
  FakeBpfMap slot_{"sluice_nat_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 64};
  FakeBpfMap member_{"sluice_nat_member", sizeof(sluice_lb_member), 1, 64};
  FakeBpfMap stats_{"sluice_nat_stats", sizeof(uint32_t), kCpus * sizeof(sluice_lb_stats), 64};
  FakeBpfMap ranges_{"sluice_nat_range", sizeof(sluice_nat_range), 1, 64};
  FakeBpfMap ct_{"sluice_nat_ct", sizeof(sluice_nat_tuple), sizeof(sluice_nat_ct), 64};
  FakeBpfMap traffic_{"sluice_nat_traffi", sizeof(uint32_t), kCpus * sizeof(sluice_nat_traffic),
                      64};
  FakeBpfMap drops_{"sluice_nat_drops", sizeof(uint32_t), kCpus * sizeof(uint64_t), 64};
  FakeBpfMap remote_{"sluice_nat_rmt", sizeof(sluice_nat_host), 1, 64};
  FakeBpfMap snat_{"sluice_nat_snat", sizeof(uint32_t), sizeof(sluice_nat_ifaddr), 64};
  int checked_ = 0;
};

TEST_F(ExtNatTest, AGuardedFrontendHasItsRangesBeforeItIsServedAndUntilItIsNot) {
  auto nat = Make();
  WatchTheGuard();
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24", "2001:db8::/32"})}}).ok());
  EXPECT_TRUE(Served("203.0.113.10:80"));
  EXPECT_EQ(Trie(RangeKey("203.0.113.10:80", "198.51.100.0/24")), 1);
  // An IPv6 range can never match an IPv4 frontend's packets: not written.
  EXPECT_EQ(ranges_.size(), 2u);
  ASSERT_TRUE(nat->Apply({{"web", std::nullopt}}).ok());
  EXPECT_FALSE(Served("203.0.113.10:80"));
  EXPECT_EQ(ranges_.size(), 0u);
  EXPECT_GT(checked_, 4);
}

TEST_F(ExtNatTest, KeysAreTheFrontendThenTheMappedRange) {
  const sluice_nat_range k = RangeKey("203.0.113.10:80", "198.51.100.7/24");
  EXPECT_EQ(k.prefixlen, 160u + 96u + 24u);
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 7};
  EXPECT_EQ(std::memcmp(k.addr, mapped, 16), 0);
  auto nat = Make();
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.7/24"})}}).ok());
  // Written with the host bits cleared.
  EXPECT_EQ(Trie(RangeKey("203.0.113.10:80", "198.51.100.0/24")), 1);
  EXPECT_FALSE(Trie(k));
}

TEST_F(ExtNatTest, AnIpv6RangeOfEverySourceIsTheGuardKeyAllowing) {
  auto nat = Make();
  Service s;
  s.frontends = {{Addr("[2001:db8::10]:80"), false}};
  s.backends = {Addr("[fd00::1]:80")};
  s.source_ranges[Addr("[2001:db8::10]:80").ip()] = {Range("::/0"), Range("2001:db8:1::/48")};
  ASSERT_TRUE(nat->Apply({{"web6", s}}).ok());
  EXPECT_EQ(Trie(RangeKey("[2001:db8::10]:80")), 1);
  EXPECT_EQ(Trie(RangeKey("[2001:db8::10]:80", "2001:db8:1::/48")), 1);
  EXPECT_EQ(RangeKey("[2001:db8::10]:80", "2001:db8:1::/48").prefixlen, 160u + 48u);
  EXPECT_EQ(ranges_.size(), 2u);
}

TEST_F(ExtNatTest, ChangedRangesKeepTheGuardAndReplaceTheRanges) {
  auto nat = Make();
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24", "198.51.101.0/24"})}}).ok());
  WatchTheGuard();
  for (FakeBpfMap* m : {&svc_, &ranges_}) {
    auto guard = m->on_write;
    m->on_write = [this, guard] {
      guard();
      EXPECT_EQ(Trie(RangeKey("203.0.113.10:80", "198.51.101.0/24")), 1);  // kept throughout
    };
  }
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.101.0/24", "198.51.102.0/24"})}}).ok());
  EXPECT_FALSE(Trie(RangeKey("203.0.113.10:80", "198.51.100.0/24")));
  EXPECT_EQ(Trie(RangeKey("203.0.113.10:80", "198.51.102.0/24")), 1);
  EXPECT_EQ(ranges_.size(), 3u);
  // No ranges any more: served to everyone, the guard removed after.
  svc_.on_write = ranges_.on_write = nullptr;
  ASSERT_TRUE(nat->Apply({{"web", Lb({})}}).ok());
  EXPECT_TRUE(Served("203.0.113.10:80"));
  EXPECT_EQ(ranges_.size(), 0u);
}

TEST_F(ExtNatTest, AnUnguardedFrontendHasNoRangeEntries) {
  auto nat = Make();
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24"})}}).ok());
  EXPECT_TRUE(Served("192.0.2.1:30080"));
  EXPECT_FALSE(Trie(RangeKey("192.0.2.1:30080")));
  EXPECT_EQ(ranges_.size(), 2u);  // the LB IP's only
  ASSERT_TRUE(nat->Apply({{"other", Lb({})}}).ok());
  EXPECT_EQ(ranges_.size(), 2u);
}

TEST_F(ExtNatTest, AGuardNotWrittenLeavesItsFrontendToTheProxy) {
  auto nat = Make();
  ranges_.FailNext("Update", absl::ResourceExhaustedError("update sluice_nat_range: full"));
  const absl::Status st = nat->Apply({{"web", Lb({"198.51.100.0/24"})}});
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_FALSE(Served("203.0.113.10:80"));  // the stack (the proxy) gets its packets
  EXPECT_TRUE(Served("192.0.2.1:30080"));   // unguarded: served
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24"})}}).ok());
  EXPECT_TRUE(Served("203.0.113.10:80"));
  EXPECT_EQ(ranges_.size(), 2u);
}

TEST_F(ExtNatTest, AFrontendMovingBetweenServicesKeepsItsGuard) {
  auto nat = Make();
  ASSERT_TRUE(nat->Apply({{"a", Lb({"198.51.100.0/24"})}}).ok());
  WatchTheGuard();
  ASSERT_TRUE(nat->Apply({{"a", std::nullopt}, {"b", Lb({"198.51.100.0/24"})}}).ok());
  EXPECT_TRUE(Served("203.0.113.10:80"));
  EXPECT_EQ(ranges_.size(), 2u);
}

// An agent restarted over pinned maps: the first complete programming removes the ranges it
// did not write, after the frontends they guarded are gone.
TEST_F(ExtNatTest, TheFirstApplyAllSweepsAnEarlierAgentsRanges) {
  Service gone = Lb({"198.51.100.0/24"});
  gone.frontends = {{Addr("203.0.113.99:443"), false}};
  gone.source_ranges = {{Addr("203.0.113.99:443").ip(), {Range("198.51.100.0/24")}}};
  ASSERT_TRUE(Make()->Apply({{"web", Lb({"198.51.100.0/24"})}, {"gone", gone}}).ok());
  ASSERT_EQ(ranges_.size(), 4u);
  auto nat = Make();
  EXPECT_TRUE(nat->adopted());
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24"})}}).ok());
  EXPECT_EQ(ranges_.size(), 4u);  // Apply does not sweep
  svc_.on_write = [this] {
    if (Served("203.0.113.99:443")) {
      EXPECT_EQ(Trie(RangeKey("203.0.113.99:443")), 0);
    }
  };
  ranges_.on_write = svc_.on_write;
  ASSERT_TRUE(nat->ApplyAll({{"web", Lb({"198.51.100.0/24"})}}).ok());
  EXPECT_FALSE(Served("203.0.113.99:443"));
  EXPECT_FALSE(Trie(RangeKey("203.0.113.99:443")));
  EXPECT_EQ(ranges_.size(), 2u);
  EXPECT_EQ(Trie(RangeKey("203.0.113.10:80")), 0);
}

// Every map's entries, by name: what the kernel would hold.
std::map<std::string, std::vector<std::string>> Dump(std::vector<FakeBpfMap*> maps) {
  std::map<std::string, std::vector<std::string>> out;
  for (FakeBpfMap* m : maps) {
    auto& list = out[m->name()];
    (void)m->ForEach([&](const void* k, const void* v) {
      list.push_back(std::string(static_cast<const char*>(k), m->key_size()) + "=" +
                     std::string(static_cast<const char*>(v), m->value_size()));
    });
  }
  return out;
}

void Clear(FakeBpfMap& m) {
  std::vector<std::string> keys;
  (void)m.ForEach([&](const void* k, const void*) {
    keys.emplace_back(static_cast<const char*>(k), m.key_size());
  });
  for (const std::string& k : keys) {
    ASSERT_TRUE(m.Delete(k.data()).ok());
  }
}

TEST_F(ExtNatTest, ApplyAndApplyAllProgramTheSame) {
  Service dns;
  dns.frontends = {{Addr("192.0.2.1:30053"), true}};
  dns.backends = {Addr("10.0.0.5:53"), Addr("10.0.0.6:53")};
  dns.affinity = absl::Seconds(30);
  const std::map<std::string, Service> all = {
      {"web", Lb({"198.51.100.0/24", "198.51.101.0/24"}, {"10.0.0.1:80", "10.0.0.2:80"})},
      {"dns", dns}};
  auto incremental = Make();
  ASSERT_TRUE(incremental->Apply({{"web", Lb({"198.51.100.0/24"})}}).ok());
  ASSERT_TRUE(incremental->Apply({{"web", all.at("web")}, {"dns", dns}}).ok());
  ASSERT_TRUE(incremental->Apply({}).ok());  // frees the swapped set
  const auto by_apply = Dump({&svc_, &slot_, &member_, &ranges_});
  const auto frontends = incremental->Frontends();
  incremental.reset();

  for (FakeBpfMap* m : {&svc_, &slot_, &member_, &stats_, &ranges_, &traffic_}) {
    Clear(*m);
  }
  auto whole = Make();
  ASSERT_TRUE(whole->ApplyAll(all).ok());
  // Ids and set numbers differ by history; compare what the entries say.
  EXPECT_EQ(Dump({&ranges_}).at("sluice_nat_range"), by_apply.at("sluice_nat_range"));
  EXPECT_EQ(svc_.size(), by_apply.at("sluice_nat_svc").size());
  EXPECT_EQ(slot_.size(), by_apply.at("sluice_nat_slot").size());
  EXPECT_EQ(member_.size(), by_apply.at("sluice_nat_member").size());
  EXPECT_EQ(whole->Frontends(), frontends);
  // And ApplyAll of less removes the rest, ranges too.
  ASSERT_TRUE(whole->ApplyAll({{"dns", dns}}).ok());
  EXPECT_EQ(ranges_.size(), 0u);
  EXPECT_THAT(whole->Frontends(), ElementsAre(::testing::Key("dns")));
}

TEST_F(ExtNatTest, CountersSumEveryCpuByServicePort) {
  auto nat = Make();
  ASSERT_TRUE(nat->Apply({{"web", Lb({"198.51.100.0/24"})}}).ok());
  sluice_lb_svc v;
  const sluice_lb_key key = Front("203.0.113.10:80");
  ASSERT_TRUE(svc_.Lookup(&key, &v).ok());
  EXPECT_EQ(traffic_.size(), 0u);  // the programs create it at the first packet
  EXPECT_EQ(nat->Counters().at("web").packets, 0u);
  const sluice_lb_stats stats[kCpus] = {{.translated = 2, .refused = 5}, {.translated = 3}};
  const sluice_nat_traffic traffic[kCpus] = {{.packets = 10, .bytes = 1000},
                                             {.packets = 7, .bytes = 700}};
  ASSERT_TRUE(stats_.Update(&v.id, stats, BPF_NOEXIST).ok());
  ASSERT_TRUE(traffic_.Update(&v.id, traffic, BPF_NOEXIST).ok());
  const ExtNat::Counts c = nat->Counters().at("web");
  EXPECT_EQ(c.flows, 5u);
  EXPECT_EQ(c.range_drops, 5u);
  EXPECT_EQ(c.packets, 17u);
  EXPECT_EQ(c.bytes, 1700u);
  ASSERT_TRUE(nat->Apply({{"web", std::nullopt}}).ok());
  EXPECT_EQ(traffic_.size(), 0u);
  EXPECT_THAT(nat->Counters(), IsEmpty());
}

// Each counter map is read once and joined by id: a port gets its own flows and traffic, a
// failed walk of one map leaves only that map's counters zero.
TEST_F(ExtNatTest, ForEachCounterJoinsEachMapById) {
  auto nat = Make();
  Service other = Lb({});
  other.frontends = {{Addr("203.0.113.11:80"), false}};
  ASSERT_TRUE(nat->Apply({{"web", Lb({})}, {"api", other}}).ok());
  sluice_lb_svc web, api;
  const sluice_lb_key web_key = Front("203.0.113.10:80");
  const sluice_lb_key api_key = Front("203.0.113.11:80");
  ASSERT_TRUE(svc_.Lookup(&web_key, &web).ok());
  ASSERT_TRUE(svc_.Lookup(&api_key, &api).ok());
  const sluice_lb_stats stats[kCpus] = {{.translated = 1}, {.translated = 2}};
  const sluice_nat_traffic traffic[kCpus] = {{.packets = 4, .bytes = 400}};
  ASSERT_TRUE(stats_.Update(&api.id, stats, BPF_NOEXIST).ok());
  ASSERT_TRUE(traffic_.Update(&web.id, traffic, BPF_NOEXIST).ok());
  std::vector<std::string> seen;
  auto read = [&] {
    seen.clear();
    nat->ForEachCounter([&](const std::string& name, const ExtNat::Counts& c) {
      seen.push_back(absl::StrCat(name, " ", c.flows, " ", c.packets, " ", c.bytes));
    });
  };
  read();
  EXPECT_THAT(seen, ElementsAre("api 3 0 0", "web 0 4 400"));
  traffic_.FailNext("ForEach", absl::InternalError("injected"));
  read();
  EXPECT_THAT(seen, ElementsAre("api 3 0 0", "web 0 0 0"));
}

TEST_F(ExtNatTest, AdoptedTrafficCountersOfANewIdAreRemoved) {
  // An earlier agent's frontend (id 1), and packets it counted under id 2 after it removed that
  // service port; this agent continues at id 2.
  const sluice_lb_key old_key = Front("203.0.113.99:80");
  const sluice_lb_svc old_value{.id = 1, .set = 1, .count = 0};
  ASSERT_TRUE(svc_.Update(&old_key, &old_value, BPF_ANY).ok());
  const uint32_t stale_id = 2;
  const sluice_nat_traffic stale[kCpus] = {{.packets = 3, .bytes = 300}};
  ASSERT_TRUE(traffic_.Update(&stale_id, stale, BPF_ANY).ok());
  auto nat = Make();
  ASSERT_TRUE(nat->adopted());
  ASSERT_TRUE(nat->Apply({{"web", Lb({})}}).ok());
  sluice_lb_svc v;
  const sluice_lb_key key = Front("203.0.113.10:80");
  ASSERT_TRUE(svc_.Lookup(&key, &v).ok());
  ASSERT_EQ(v.id, stale_id);
  EXPECT_EQ(traffic_.size(), 0u);
  EXPECT_EQ(nat->Counters().at("web").packets, 0u);
}

TEST_F(ExtNatTest, DropsSumEveryCpuByReason) {
  auto nat = Make();
  const uint64_t full[kCpus] = {4, 1};
  const uint64_t fragment[kCpus] = {0, 2};
  const uint32_t ct_full = SLUICE_NAT_CT_FULL;
  const uint32_t frag = SLUICE_NAT_FRAGMENT;
  ASSERT_TRUE(drops_.Update(&ct_full, full, BPF_ANY).ok());
  ASSERT_TRUE(drops_.Update(&frag, fragment, BPF_ANY).ok());
  const auto drops = nat->Drops();
  EXPECT_EQ(drops.at("conntrack_full"), 5u);
  EXPECT_EQ(drops.at("fragment"), 2u);
  EXPECT_EQ(drops.at("source_range"), 0u);
  EXPECT_EQ(drops.at("malformed"), 0u);
  EXPECT_EQ(drops.at("snat_ports"), 0u);
  EXPECT_EQ(drops.at("no_route"), 0u);
  EXPECT_EQ(drops.at("mtu"), 0u);
  EXPECT_EQ(drops.at("mtu_icmp"), 0u);
  EXPECT_EQ(drops.size(), 8u);
}

// Remote backends are listed while any service port has them, before it is served with them.
TEST_F(ExtNatTest, RemoteBackendsAreListedWhileAServicePortHasThem) {
  auto nat = Make();
  auto listed = [&](const std::string& ip) {
    return remote_.Contains(Host(net::SocketAddress(*net::IpAddress::Parse(ip), 0)));
  };
  // A remote backend of a served port is listed whenever the port is served (a packet between
  // two writes must never reach it without SNAT).
  svc_.on_write = [&] {
    if (Served("192.0.2.1:30080")) {
      EXPECT_TRUE(listed("10.0.1.7"));
    }
  };
  Service web = Lb({}, {"10.0.0.1:80", "10.0.1.7:80"});
  web.remote = {*net::IpAddress::Parse("10.0.1.7")};
  Service api = web;
  api.frontends = {{Addr("192.0.2.1:30081"), false}};
  ASSERT_TRUE(nat->Apply({{"web", web}, {"api", api}}).ok());
  EXPECT_TRUE(listed("10.0.1.7"));
  EXPECT_FALSE(listed("10.0.0.1"));
  svc_.on_write = nullptr;
  ASSERT_TRUE(nat->Apply({{"web", std::nullopt}}).ok());
  EXPECT_TRUE(listed("10.0.1.7")) << "api still has it";
  api.remote.clear();
  ASSERT_TRUE(nat->Apply({{"api", api}}).ok());
  EXPECT_FALSE(listed("10.0.1.7"));
  EXPECT_EQ(remote_.size(), 0u);
}

TEST_F(ExtNatTest, AServicePortWhoseRemoteBackendsCannotBeListedIsLeftToTheProxy) {
  auto nat = Make();
  Service web = Lb({}, {"10.0.1.7:80"});
  web.remote = {*net::IpAddress::Parse("10.0.1.7")};
  remote_.FailNext("Update", absl::ResourceExhaustedError("full"));
  EXPECT_FALSE(nat->Apply({{"web", web}}).ok());
  EXPECT_FALSE(Served("192.0.2.1:30080"));
  ASSERT_TRUE(nat->Apply({{"web", web}}).ok());
  EXPECT_TRUE(Served("192.0.2.1:30080"));
}

// An earlier agent's remote entries go at the first full sync.
TEST_F(ExtNatTest, ApplyAllSweepsRemoteEntriesNoPortHas) {
  const sluice_nat_host stale = Host(Addr("10.9.9.9:0"));
  const uint8_t one = 1;
  ASSERT_TRUE(remote_.Update(&stale, &one, BPF_ANY).ok());
  auto nat = Make();
  Service web = Lb({}, {"10.0.1.7:80"});
  web.remote = {*net::IpAddress::Parse("10.0.1.7")};
  ASSERT_TRUE(nat->ApplyAll({{"web", web}}).ok());
  EXPECT_FALSE(remote_.Contains(stale));
  EXPECT_TRUE(remote_.Contains(Host(Addr("10.0.1.7:0"))));
}

TEST_F(ExtNatTest, SnatDevicesHoldTheirAddressesByIfindex) {
  auto nat = Make();
  const uint32_t lo = 1;  // if_nametoindex("lo") in any namespace
  const uint32_t gone = 4242;
  const sluice_nat_ifaddr old{};
  ASSERT_TRUE(snat_.Update(&gone, &old, BPF_ANY).ok());
  ASSERT_TRUE(nat->SetSnatDevices({{.device = "lo", .v4 = net::IpAddress::Parse("192.0.2.1")},
                                   {.device = "no-such-device0"}})
                  .ok());
  sluice_nat_ifaddr a{};
  ASSERT_TRUE(snat_.Lookup(&lo, &a).ok());
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
  EXPECT_EQ(std::memcmp(a.v4, mapped, 16), 0);
  const uint8_t zero[16] = {};
  EXPECT_EQ(std::memcmp(a.v6, zero, 16), 0);
  EXPECT_EQ(snat_.size(), 1u) << "the earlier agent's device is gone";
}

TEST_F(ExtNatTest, WithoutProgramsDevicesAreRecorded) {
  auto nat = Make();
  EXPECT_THAT(nat->Devices(), IsEmpty());
  ASSERT_TRUE(nat->SetDevices({"eth0", "eth1"}).ok());
  EXPECT_THAT(nat->Devices(), ElementsAre("eth0", "eth1"));
  EXPECT_FALSE(nat->adopted());
}

}  // namespace
}  // namespace sluice::extnat
