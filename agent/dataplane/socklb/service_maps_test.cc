// SPDX-License-Identifier: Apache-2.0
// The programming rules of the socket-LB maps over FakeBpfMap: unprivileged. What the programs
// do with the entries is tested on the kernel (tests/bpf/socket_lb_kernel_test.cc).
#include "agent/dataplane/socklb/service_maps.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/dataplane/fastpath/fake_bpf_map.h"
#include "agent/dataplane/socklb/socket_lb.h"

namespace sluice::socklb {
namespace {

using fastpath::FakeBpfMap;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint32_t kCpus = 2;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

// "ip:port" of a map address, IPv4 shown without its ::ffff: prefix.
std::string Show(const sluice_lb_addr& a) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const bool v4 = std::memcmp(a.addr, kMapped, sizeof(kMapped)) == 0;
  auto ip = v4 ? net::IpAddress::FromBytes(AF_INET, a.addr + 12, 4)
               : net::IpAddress::FromBytes(AF_INET6, a.addr, 16);
  return net::SocketAddress(*ip, ntohs(a.port)).ToString();
}

sluice_lb_key Key(const std::string& front, bool udp = false) {
  const sluice_lb_addr a = LbAddr(Addr(front));
  sluice_lb_key key{};
  std::memcpy(key.addr, a.addr, sizeof(key.addr));
  key.port = a.port;
  key.proto = udp ? IPPROTO_UDP : IPPROTO_TCP;
  return key;
}

Service Svc(std::vector<std::string> fronts, std::vector<std::string> backends, bool udp = false) {
  Service s;
  for (const auto& f : fronts) {
    s.frontends.push_back({Addr(f), udp});
  }
  for (const auto& b : backends) {
    s.backends.push_back(Addr(b));
  }
  return s;
}

class ServiceMapsTest : public ::testing::Test {
 protected:
  ServiceMaps::Maps maps() {
    return {.svc = svc_, .slot = slot_, .member = member_, .stats = stats_};
  }
  // Counters of `id` as a program creates them at its first connect.
  void CountersInUse(uint32_t id) {
    const sluice_lb_stats zero[kCpus] = {};
    ASSERT_TRUE(stats_.Update(&id, zero, BPF_NOEXIST).ok());
  }
  std::optional<sluice_lb_svc> Value(const std::string& front, bool udp = false) {
    auto v = fastpath::TypedMap<sluice_lb_key, sluice_lb_svc>(svc_).Lookup(Key(front, udp));
    return v.ok() ? std::optional(*v) : std::nullopt;
  }
  // What a program sees for `front`: its value's backend set, in order; nullopt for a slot
  // missing (a program then re-reads the service).
  std::optional<std::vector<std::string>> Backends(const sluice_lb_svc& v) {
    std::vector<std::string> out;
    for (uint32_t i = 0; i < v.count; ++i) {
      auto be = fastpath::TypedMap<sluice_lb_slot, sluice_lb_addr>(slot_).Lookup(
          {.set = v.set, .index = i});
      if (!be.ok()) {
        return std::nullopt;
      }
      out.push_back(Show(*be));
    }
    return out;
  }
  std::vector<std::string> Backends(const std::string& front, bool udp = false) {
    auto v = Value(front, udp);
    if (!v) {
      return {"<no frontend>"};
    }
    return Backends(*v).value_or(std::vector<std::string>{"<incomplete set>"});
  }
  // Whether every frontend's value points at a complete backend set: what a program running
  // between any two map writes must find.
  bool Consistent() {
    bool ok = true;
    (void)svc_.ForEach([&](const void*, const void* value) {
      sluice_lb_svc v;
      std::memcpy(&v, value, sizeof(v));
      ok = ok && Backends(v).has_value();
    });
    return ok;
  }
  void WatchEveryWrite() {
    for (FakeBpfMap* m : {&svc_, &slot_, &member_, &stats_}) {
      m->on_write = [this] {
        ++checked_;
        EXPECT_TRUE(Consistent()) << "after map write " << checked_;
      };
    }
  }

  FakeBpfMap svc_{"sluice_lb_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 64};
  FakeBpfMap slot_{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 64};
  FakeBpfMap member_{"sluice_lb_member", sizeof(sluice_lb_member), 1, 64};
  FakeBpfMap stats_{"sluice_lb_stats", sizeof(uint32_t), kCpus * sizeof(sluice_lb_stats), 64};
  int checked_ = 0;
  std::vector<Gone> gone_;
};

TEST_F(ServiceMapsTest, AServiceIsOneValuePerFrontendOverOneBackendSet) {
  ServiceMaps sm(maps());
  EXPECT_FALSE(sm.adopted());
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.10:80", "192.0.2.1:30080"},
                                    {"10.0.0.1:8080", "10.0.0.2:8080"})}},
                       gone_)
                  .ok());
  EXPECT_THAT(Backends("10.96.0.10:80"), ElementsAre("10.0.0.1:8080", "10.0.0.2:8080"));
  EXPECT_THAT(Backends("192.0.2.1:30080"), ElementsAre("10.0.0.1:8080", "10.0.0.2:8080"));
  EXPECT_EQ(Value("10.96.0.10:80")->set, Value("192.0.2.1:30080")->set);
  EXPECT_EQ(Value("10.96.0.10:80")->id, Value("192.0.2.1:30080")->id);
  EXPECT_EQ(slot_.size(), 2u);
  EXPECT_EQ(stats_.size(), 0u);   // the programs create counters at first use
  EXPECT_EQ(member_.size(), 0u);  // no affinity: no membership entries
  EXPECT_FALSE(Value("10.96.0.10:80", /*udp=*/true));
  EXPECT_THAT(sm.Frontends()["web"], ElementsAre("tcp/10.96.0.10:80", "tcp/192.0.2.1:30080"));
}

TEST_F(ServiceMapsTest, FamiliesAreKeyedAsMappedIpv4AndIpv6) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"v4", Svc({"10.96.0.10:53"}, {"10.0.0.1:53"}, true)},
                        {"v6", Svc({"[fd00::10]:53"}, {"[fd00::1]:53"}, true)}},
                       gone_)
                  .ok());
  const sluice_lb_key k = Key("10.96.0.10:53", true);
  const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 96, 0, 10};
  EXPECT_EQ(std::memcmp(k.addr, mapped, 16), 0);
  EXPECT_EQ(k.port, htons(53));
  EXPECT_THAT(Backends("10.96.0.10:53", true), ElementsAre("10.0.0.1:53"));
  EXPECT_THAT(Backends("[fd00::10]:53", true), ElementsAre("[fd00::1]:53"));
  EXPECT_FALSE(Value("10.96.0.10:53", /*udp=*/false));  // the protocol is part of the key
}

TEST_F(ServiceMapsTest, ABackendSetSwapIsOneWriteAfterTheNewSetIsComplete) {
  ServiceMaps sm(maps());
  WatchEveryWrite();
  ASSERT_TRUE(
      sm.Apply({{"web", Svc({"10.96.0.10:80", "10.96.0.11:80"}, {"10.0.0.1:8080"})}}, gone_).ok());
  const uint32_t first = Value("10.96.0.10:80")->set;
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.10:80", "10.96.0.11:80"},
                                    {"10.0.0.2:8080", "10.0.0.3:8080"})}},
                       gone_)
                  .ok());
  const sluice_lb_svc now = *Value("10.96.0.10:80");
  EXPECT_NE(now.set, first);
  EXPECT_THAT(Backends("10.96.0.11:80"), ElementsAre("10.0.0.2:8080", "10.0.0.3:8080"));
  // The old set stays until the next Apply: a program that read the old value finds it whole.
  EXPECT_TRUE(slot_.Contains(sluice_lb_slot{.set = first, .index = 0}));
  ASSERT_TRUE(sm.Apply({}, gone_).ok());
  EXPECT_FALSE(slot_.Contains(sluice_lb_slot{.set = first, .index = 0}));
  EXPECT_EQ(slot_.size(), 2u);
  EXPECT_GT(checked_, 0);
}

TEST_F(ServiceMapsTest, AnUnchangedServiceWritesNothingAndAFrontendChangeKeepsTheSet) {
  ServiceMaps sm(maps());
  const Service web = Svc({"10.96.0.10:80"}, {"10.0.0.1:8080"});
  ASSERT_TRUE(sm.Apply({{"web", web}}, gone_).ok());
  const uint64_t writes = svc_.writes() + slot_.writes();
  ASSERT_TRUE(sm.Apply({{"web", web}, {"other", std::nullopt}}, gone_).ok());
  EXPECT_EQ(svc_.writes() + slot_.writes(), writes);
  const uint32_t set = Value("10.96.0.10:80")->set;
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.12:80"}, {"10.0.0.1:8080"})}}, gone_).ok());
  EXPECT_FALSE(Value("10.96.0.10:80"));
  EXPECT_EQ(Value("10.96.0.12:80")->set, set);
}

TEST_F(ServiceMapsTest, NoBackendsIsAValueWithCountZero) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.10:80"}, {})}}, gone_).ok());
  EXPECT_EQ(Value("10.96.0.10:80")->count, 0u);  // the program refuses: ECONNREFUSED
}

TEST_F(ServiceMapsTest, AffinityKeepsMembershipOfTheCurrentBackends) {
  ServiceMaps sm(maps());
  Service web = Svc({"10.96.0.10:80"}, {"10.0.0.1:8080", "10.0.0.2:8080"});
  web.affinity = absl::Seconds(10800);
  web.random = true;
  ASSERT_TRUE(sm.Apply({{"web", web}}, gone_).ok());
  const sluice_lb_svc v = *Value("10.96.0.10:80");
  EXPECT_EQ(v.affinity, 10800u);
  EXPECT_EQ(v.flags, static_cast<uint32_t>(SLUICE_LB_RANDOM));
  auto member = [&](const std::string& b) {
    return member_.Contains(sluice_lb_member{.id = v.id, .backend = LbAddr(Addr(b))});
  };
  EXPECT_TRUE(member("10.0.0.1:8080"));
  EXPECT_TRUE(member("10.0.0.2:8080"));
  web.backends = {Addr("10.0.0.2:8080"), Addr("10.0.0.3:8080")};
  ASSERT_TRUE(sm.Apply({{"web", web}}, gone_).ok());
  EXPECT_FALSE(member("10.0.0.1:8080"));  // a client stuck to it picks afresh
  EXPECT_TRUE(member("10.0.0.3:8080"));
  web.affinity = absl::ZeroDuration();
  ASSERT_TRUE(sm.Apply({{"web", web}}, gone_).ok());
  EXPECT_EQ(member_.size(), 0u);
  EXPECT_EQ(Value("10.96.0.10:80")->affinity, 0u);
}

TEST_F(ServiceMapsTest, RemovalDeletesEverythingOfTheService) {
  ServiceMaps sm(maps());
  Service web = Svc({"10.96.0.10:80"}, {"10.0.0.1:8080"});
  web.affinity = absl::Seconds(60);
  ASSERT_TRUE(sm.Apply({{"web", web}}, gone_).ok());
  CountersInUse(Value("10.96.0.10:80")->id);
  ASSERT_TRUE(sm.Apply({{"web", std::nullopt}}, gone_).ok());
  EXPECT_EQ(svc_.size(), 0u);
  EXPECT_EQ(member_.size(), 0u);
  EXPECT_EQ(stats_.size(), 0u);
  EXPECT_EQ(slot_.size(), 1u);  // freed at the next Apply, as a swapped set
  ASSERT_TRUE(sm.Apply({}, gone_).ok());
  EXPECT_EQ(slot_.size(), 0u);
  EXPECT_THAT(sm.Frontends(), IsEmpty());
}

TEST_F(ServiceMapsTest, UdpBackendsThatLeaveAreReportedForTheReaper) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"dns", Svc({"10.96.0.10:53"}, {"10.0.0.1:53", "10.0.0.2:53"}, true)},
                        {"web", Svc({"10.96.0.11:80"}, {"10.0.0.1:80"})}},
                       gone_)
                  .ok());
  EXPECT_THAT(gone_, IsEmpty());
  ASSERT_TRUE(sm.Apply({{"dns", Svc({"10.96.0.10:53"}, {"10.0.0.2:53"}, true)},
                        {"web", Svc({"10.96.0.11:80"}, {"10.0.0.2:80"})}},
                       gone_)
                  .ok());
  // TCP connections are left to finish: only the UDP pair.
  EXPECT_THAT(gone_, ElementsAre(Gone{Addr("10.96.0.10:53"), Addr("10.0.0.1:53")}));
  gone_.clear();
  ASSERT_TRUE(sm.Apply({{"dns", std::nullopt}}, gone_).ok());
  EXPECT_THAT(gone_, ElementsAre(Gone{Addr("10.96.0.10:53"), Addr("10.0.0.2:53")}));
}

TEST_F(ServiceMapsTest, AFullMapFailsThatServiceAndLeavesTheOthers) {
  FakeBpfMap small_slots{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 2};
  ServiceMaps sm({.svc = svc_, .slot = small_slots, .member = member_, .stats = stats_});
  ASSERT_TRUE(sm.Apply({{"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})}}, gone_).ok());
  const absl::Status st =
      sm.Apply({{"b", Svc({"10.96.0.2:80"}, {"10.0.0.1:80", "10.0.0.2:80"})}}, gone_);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_FALSE(Value("10.96.0.2:80"));  // never pointed at a partial set
  EXPECT_EQ(small_slots.size(), 1u);    // the partial set was freed
  EXPECT_TRUE(Value("10.96.0.1:80"));
}

TEST_F(ServiceMapsTest, CountersSumEveryCpu) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.10:80"}, {"10.0.0.1:8080"})}}, gone_).ok());
  const uint32_t id = Value("10.96.0.10:80")->id;
  const sluice_lb_stats per_cpu[kCpus] = {{.translated = 3, .refused = 1},
                                          {.translated = 4, .refused = 0}};
  ASSERT_TRUE(stats_.Update(&id, per_cpu, BPF_NOEXIST).ok());  // as the programs create it
  const auto counts = sm.Counters();
  EXPECT_EQ(counts.at("web").translated, 7u);
  EXPECT_EQ(counts.at("web").refused, 1u);
}

// One pass over the stats map serves every programmed port, in name order: a port whose
// counters the programs have not made yet reads zero, and counters of an id no port has (being
// removed) are left out.
TEST_F(ServiceMapsTest, ForEachCounterListsEveryProgrammedPortInNameOrder) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"b", Svc({"10.96.0.2:80"}, {"10.0.0.2:80"})},
                        {"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})}},
                       gone_)
                  .ok());
  const uint32_t b = Value("10.96.0.2:80")->id;
  const sluice_lb_stats per_cpu[kCpus] = {{.translated = 2, .refused = 0},
                                          {.translated = 0, .refused = 5}};
  ASSERT_TRUE(stats_.Update(&b, per_cpu, BPF_NOEXIST).ok());
  const uint32_t stray = 999;
  ASSERT_TRUE(stats_.Update(&stray, per_cpu, BPF_NOEXIST).ok());
  std::vector<std::string> seen;
  sm.ForEachCounter([&](const std::string& name, uint32_t id, const ServiceMaps::Counts& c) {
    seen.push_back(absl::StrCat(name, " ", id == b ? 1 : 0, " ", c.translated, "/", c.refused));
  });
  EXPECT_THAT(seen, ElementsAre("a 0 0/0", "b 1 2/5"));
}

// Ids() is a snapshot: later Applys leave a copy taken before them as it was.
TEST_F(ServiceMapsTest, IdsAreASnapshot) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})}}, gone_).ok());
  const uint32_t a = Value("10.96.0.1:80")->id;
  const ServiceMaps::IdMap before = sm.Ids();
  ASSERT_TRUE(
      sm.Apply({{"a", std::nullopt}, {"b", Svc({"10.96.0.2:80"}, {"10.0.0.2:80"})}}, gone_).ok());
  // A changed backend set keeps the port's id.
  ASSERT_TRUE(sm.Apply({{"b", Svc({"10.96.0.2:80"}, {"10.0.0.3:80"})}}, gone_).ok());
  const uint32_t b = Value("10.96.0.2:80")->id;
  std::map<std::string, uint32_t> then(before.begin(), before.end());
  const ServiceMaps::IdMap after = sm.Ids();
  std::map<std::string, uint32_t> now(after.begin(), after.end());
  EXPECT_EQ(then, (std::map<std::string, uint32_t>{{"a", a}}));
  EXPECT_EQ(now, (std::map<std::string, uint32_t>{{"b", b}}));
}

// An agent restarted over pinned maps: ids and sets continue above what it finds, the adopted
// entries serve until the first complete programming, which removes what it did not program.
TEST_F(ServiceMapsTest, AdoptedMapsAreSweptByTheFirstApplyAll) {
  {
    ServiceMaps earlier(maps());
    Service old_web = Svc({"10.96.0.10:80"}, {"10.0.0.1:8080"});
    old_web.affinity = absl::Seconds(60);
    ASSERT_TRUE(earlier
                    .Apply({{"web", old_web},
                            {"gone", Svc({"10.96.0.99:80"}, {"10.0.0.9:8080", "10.0.0.8:8080"})}},
                           gone_)
                    .ok());
  }
  CountersInUse(Value("10.96.0.10:80")->id);
  CountersInUse(Value("10.96.0.99:80")->id);
  const uint32_t old_set = Value("10.96.0.10:80")->set;
  ServiceMaps sm(maps());
  EXPECT_TRUE(sm.adopted());
  EXPECT_THAT(Backends("10.96.0.99:80"), ElementsAre("10.0.0.9:8080", "10.0.0.8:8080"));
  WatchEveryWrite();
  ASSERT_TRUE(sm.Apply({{"web", Svc({"10.96.0.10:80"}, {"10.0.0.2:8080"})}}, gone_).ok());
  EXPECT_THAT(Backends("10.96.0.99:80"), ElementsAre("10.0.0.9:8080", "10.0.0.8:8080"));  // not yet
  EXPECT_GT(Value("10.96.0.10:80")->set, old_set);  // numbering continues: no clash
  ASSERT_TRUE(sm.ApplyAll({{"web", Svc({"10.96.0.10:80"}, {"10.0.0.2:8080"})}}, gone_).ok());
  EXPECT_FALSE(Value("10.96.0.99:80"));
  EXPECT_THAT(Backends("10.96.0.10:80"), ElementsAre("10.0.0.2:8080"));
  EXPECT_EQ(slot_.size(), 1u);
  EXPECT_EQ(member_.size(), 0u);  // the earlier agent's affinity membership
  EXPECT_EQ(stats_.size(), 0u);   // and its services' counters (web has a new id)
  EXPECT_THAT(sm.Frontends(), ::testing::SizeIs(1));
}

TEST_F(ServiceMapsTest, ApplyAllRemovesWhatItDoesNotName) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})},
                        {"b", Svc({"10.96.0.2:80"}, {"10.0.0.1:80"})}},
                       gone_)
                  .ok());
  ASSERT_TRUE(sm.ApplyAll({{"b", Svc({"10.96.0.2:80"}, {"10.0.0.1:80"})}}, gone_).ok());
  EXPECT_FALSE(Value("10.96.0.1:80"));
  EXPECT_TRUE(Value("10.96.0.2:80"));
}

// Every entry of `m`, as bytes, to compare maps programmed in different ways.
std::map<std::string, std::string> Contents(const FakeBpfMap& m) {
  std::map<std::string, std::string> out;
  (void)m.ForEach([&](const void* k, const void* v) {
    out.emplace(std::string(static_cast<const char*>(k), m.key_size()),
                std::string(static_cast<const char*>(v), m.value_size()));
  });
  return out;
}

// Services with 1-3 backends, every third with affinity, every fifth UDP.
std::map<std::string, Service> Many(int n, int shift = 0) {
  std::map<std::string, Service> all;
  for (int i = 0; i < n; ++i) {
    std::vector<std::string> backends;
    for (int j = 0; j <= (i + shift) % 3; ++j) {
      backends.push_back(absl::StrCat("10.0.", i, ".", j + shift + 1, ":8080"));
    }
    Service s =
        Svc({absl::StrCat("10.96.0.", i + 1, ":80"), absl::StrCat("[fd00::", i + 1, "]:80")},
            backends, i % 5 == 0);
    if (i % 3 == 0) {
      s.affinity = absl::Seconds(30);
    }
    all.emplace(absl::StrCat("svc", i), std::move(s));
  }
  return all;
}

// Many changes at once are a few batch writes per map and leave the maps exactly as the same
// changes applied one by one; a program reading between any two writes finds every frontend on
// a complete set, and each frontend value is written once.
TEST_F(ServiceMapsTest, ManyChangesAreWrittenInBatchesWithTheSameResult) {
  FakeBpfMap svc{"sluice_lb_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 64};
  FakeBpfMap slot{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 64};
  FakeBpfMap member{"sluice_lb_member", sizeof(sluice_lb_member), 1, 64};
  FakeBpfMap stats{"sluice_lb_stats", sizeof(uint32_t), kCpus * sizeof(sluice_lb_stats), 64};
  ServiceMaps singly({.svc = svc, .slot = slot, .member = member, .stats = stats});
  ServiceMaps batched(maps());
  WatchEveryWrite();
  for (int shift : {0, 1}) {  // programmed, then every backend set changed
    const auto all = Many(12, shift);
    for (const auto& [name, service] : all) {
      ASSERT_TRUE(singly.Apply({{name, service}}, gone_).ok());
    }
    const uint64_t svc_writes = svc_.writes();
    const uint64_t batches = svc_.batches() + slot_.batches() + member_.batches();
    ASSERT_TRUE(batched.ApplyAll(all, gone_).ok());
    EXPECT_EQ(svc_.writes() - svc_writes, 24u);  // one per frontend
    EXPECT_EQ(svc_.batches() + slot_.batches() + member_.batches() - batches, 3u);
    EXPECT_EQ(Contents(svc_), Contents(svc));
    EXPECT_EQ(Contents(member_), Contents(member));
    EXPECT_EQ(Contents(stats_), Contents(stats));
  }
  // The sets retired by the change are freed at the next Apply, in both.
  ASSERT_TRUE(singly.Apply({}, gone_).ok());
  ASSERT_TRUE(batched.Apply({}, gone_).ok());
  EXPECT_EQ(Contents(slot_), Contents(slot));
  EXPECT_GT(checked_, 100);
}

// A map filling up in the middle of a batch fails the service whose entry did not fit (its
// partial set freed, no frontend pointing at it) and programs the ones after it.
TEST_F(ServiceMapsTest, AFullMapInTheMiddleOfABatchFailsOnlyThatService) {
  FakeBpfMap small_slots{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 3};
  ServiceMaps sm({.svc = svc_, .slot = small_slots, .member = member_, .stats = stats_});
  const absl::Status st =
      sm.ApplyAll({{"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})},
                   {"b", Svc({"10.96.0.2:80"}, {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"})},
                   {"c", Svc({"10.96.0.3:80"}, {"10.0.0.4:80"})}},
                  gone_);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  for (const char* front : {"10.96.0.1:80", "10.96.0.3:80"}) {
    const auto v = Value(front);
    ASSERT_TRUE(v) << front;
    EXPECT_EQ(v->count, 1u);
    EXPECT_TRUE(small_slots.Contains(sluice_lb_slot{.set = v->set, .index = 0})) << front;
  }
  EXPECT_FALSE(Value("10.96.0.2:80"));
  EXPECT_EQ(small_slots.size(), 2u);
  EXPECT_THAT(sm.Frontends(), ::testing::SizeIs(2));
}

// A frontend moving from one service to another in one Apply stays with the new one, whatever
// order the two changes come in.
TEST_F(ServiceMapsTest, AFrontendMovingBetweenServicesInOneApplyStaysWithTheNewOne) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"old", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})}}, gone_).ok());
  ASSERT_TRUE(
      sm.Apply({{"new", Svc({"10.96.0.1:80"}, {"10.0.0.2:80"})}, {"old", std::nullopt}}, gone_)
          .ok());
  EXPECT_THAT(Backends("10.96.0.1:80"), ElementsAre("10.0.0.2:80"));
}

// The same name twice in one Apply: applied in order.
TEST_F(ServiceMapsTest, ANameRepeatedInOneApplyEndsAsItsLastChange) {
  ServiceMaps sm(maps());
  ASSERT_TRUE(sm.Apply({{"a", Svc({"10.96.0.1:80"}, {"10.0.0.1:80"})},
                        {"a", Svc({"10.96.0.1:80"}, {"10.0.0.2:80"})},
                        {"b", Svc({"10.96.0.2:80"}, {"10.0.0.3:80"})},
                        {"b", std::nullopt}},
                       gone_)
                  .ok());
  EXPECT_THAT(Backends("10.96.0.1:80"), ElementsAre("10.0.0.2:80"));
  EXPECT_FALSE(Value("10.96.0.2:80"));
  EXPECT_THAT(sm.Frontends(), ::testing::SizeIs(1));
}

// SocketLb over fake maps (how its users' unit tests get one): no programs, no reaper.
TEST(SocketLbForMaps, ProgramsTheGivenMaps) {
  FakeBpfMap svc{"sluice_lb_svc", sizeof(sluice_lb_key), sizeof(sluice_lb_svc), 8};
  FakeBpfMap slot{"sluice_lb_slot", sizeof(sluice_lb_slot), sizeof(sluice_lb_addr), 8};
  FakeBpfMap member{"sluice_lb_member", sizeof(sluice_lb_member), 1, 8};
  FakeBpfMap stats{"sluice_lb_stats", sizeof(uint32_t), sizeof(sluice_lb_stats), 8};
  auto lb = SocketLb::ForMaps({.svc = svc, .slot = slot, .member = member, .stats = stats});
  EXPECT_FALSE(lb->can_reap());
  ASSERT_TRUE(lb->Apply({{"dns", Svc({"10.96.0.10:53"}, {"10.0.0.1:53"}, true)}}).ok());
  ASSERT_TRUE(lb->Apply({{"dns", std::nullopt}}).ok());  // a gone pair without a reaper
  EXPECT_EQ(svc.size(), 0u);
  EXPECT_THAT(lb->Frontends(), IsEmpty());
}

}  // namespace
}  // namespace sluice::socklb
