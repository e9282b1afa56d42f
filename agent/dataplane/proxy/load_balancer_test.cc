// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/load_balancer.h"

#include <set>

#include "gtest/gtest.h"

namespace sluice::proxy {
namespace {

net::SocketAddress Ep(const char* s) { return *net::SocketAddress::Parse(s); }
net::IpAddress Ip(const char* s) { return *net::IpAddress::Parse(s); }
// A monotonic time `d` after the clock's origin.
base::MonoTime At(absl::Duration d) { return base::MonoTime::FromSinceOrigin(d); }

const std::vector<net::SocketAddress> kThree = {Ep("10.0.0.1:80"), Ep("10.0.0.2:80"),
                                                Ep("10.0.0.3:80")};

TEST(BalancerTest, NoEndpointsPicksNothing) {
  Balancer b({}, {}, 1);
  EXPECT_FALSE(b.Pick(Ip("1.1.1.1"), At(absl::ZeroDuration())));
}

TEST(BalancerTest, RoundRobinCyclesThroughEveryEndpoint) {
  Balancer b(kThree, {}, 7);
  std::vector<net::SocketAddress> picks;
  picks.reserve(6);
  for (int i = 0; i < 6; ++i) {
    picks.push_back(*b.Pick(Ip("1.1.1.1"), At(absl::ZeroDuration())));
  }
  EXPECT_EQ(std::set<net::SocketAddress>(picks.begin(), picks.begin() + 3).size(), 3u);
  EXPECT_EQ(std::vector<net::SocketAddress>(picks.begin(), picks.begin() + 3),
            std::vector<net::SocketAddress>(picks.begin() + 3, picks.end()));
}

TEST(BalancerTest, ShuffleDependsOnSeed) {
  std::set<std::vector<net::SocketAddress>> orders;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    orders.insert(Balancer(kThree, {}, seed).endpoints());
  }
  EXPECT_GT(orders.size(), 1u);
}

TEST(BalancerTest, ExcludeSkipsFailedEndpoints) {
  Balancer b(kThree, {}, 1);
  auto first = *b.Pick(Ip("1.1.1.1"), At(absl::ZeroDuration()));
  auto second = *b.Pick(Ip("1.1.1.1"), At(absl::ZeroDuration()), {first});
  EXPECT_NE(first, second);
  EXPECT_FALSE(b.Pick(Ip("1.1.1.1"), At(absl::ZeroDuration()), kThree));
}

TEST(BalancerTest, AffinityStickySlidingAndExpiring) {
  auto table = std::make_shared<AffinityTable>();
  Balancer b(kThree, {table, absl::Seconds(10)}, 1);
  auto first = *b.Pick(Ip("1.1.1.1"), At(absl::Seconds(0)));
  for (int t = 5; t <= 40; t += 5) {  // each use slides the timeout
    EXPECT_EQ(*b.Pick(Ip("1.1.1.1"), At(absl::Seconds(t))), first) << t;
  }
  EXPECT_NE(*b.Pick(Ip("2.2.2.2"), At(absl::Seconds(40))), first);  // others still rotate
  // After the timeout the client is balanced again (next in rotation differs from first).
  std::set<net::SocketAddress> after;
  for (int i = 0; i < 3; ++i) {
    after.insert(*b.Pick(Ip("3.3.3.3"), At(absl::Seconds(100 + 20 * i))));
  }
  EXPECT_EQ(after.size(), 3u);
}

TEST(BalancerTest, AffinitySurvivesAnUpdateUnlessItsEndpointLeft) {
  auto table = std::make_shared<AffinityTable>();
  Balancer before(kThree, {table, absl::Seconds(10)}, 1);
  auto sticky = *before.Pick(Ip("1.1.1.1"), At(absl::Seconds(0)));
  Balancer kept(kThree, {table, absl::Seconds(10)}, 2);
  EXPECT_EQ(*kept.Pick(Ip("1.1.1.1"), At(absl::Seconds(1))), sticky);
  std::vector<net::SocketAddress> rest;
  for (const auto& e : kThree) {
    if (e != sticky) {
      rest.push_back(e);
    }
  }
  Balancer removed(rest, {table, absl::Seconds(10)}, 3);
  EXPECT_NE(*removed.Pick(Ip("1.1.1.1"), At(absl::Seconds(2))), sticky);
}

// Same seed = same order, so after another client takes the first slot, a client still stuck
// gets endpoints()[0] and an expired one gets endpoints()[1].
net::SocketAddress PickAfterUpdate(absl::Duration new_timeout) {
  auto table = std::make_shared<AffinityTable>();
  Balancer before(kThree, {table, absl::Seconds(100)}, 1);
  EXPECT_EQ(*before.Pick(Ip("1.1.1.1"), At(absl::Seconds(0))), before.endpoints()[0]);
  Balancer after(kThree, {table, new_timeout}, 1);
  after.Pick(Ip("9.9.9.9"), At(absl::Seconds(5)));
  return *after.Pick(Ip("1.1.1.1"), At(absl::Seconds(5)));
}

TEST(BalancerTest, TimeoutChangeTakesEffectAtOnce) {
  const auto order = Balancer(kThree, {}, 1).endpoints();
  EXPECT_EQ(PickAfterUpdate(absl::Seconds(100)), order[0]);  // still within the timeout
  EXPECT_EQ(PickAfterUpdate(absl::Seconds(1)), order[1]);    // expired under the new one
}

TEST(BalancerTest, DialFailureResetsAffinity) {
  auto table = std::make_shared<AffinityTable>();
  Balancer b(kThree, {table, absl::Seconds(10)}, 1);
  auto sticky = *b.Pick(Ip("1.1.1.1"), At(absl::Seconds(0)));
  b.DialFailed(Ip("1.1.1.1"));
  EXPECT_EQ(table->size(), 0u);
  auto retry = *b.Pick(Ip("1.1.1.1"), At(absl::Seconds(0)), {sticky});
  EXPECT_NE(retry, sticky);
  EXPECT_EQ(*b.Pick(Ip("1.1.1.1"), At(absl::Seconds(1))), retry);
}

TEST(AffinityTableTest, BoundedPerShard) {
  AffinityTable table;
  size_t remembered = 0;
  for (uint32_t i = 0; i < AffinityTable::kShards * AffinityTable::kMaxPerShard + 1000; ++i) {
    in_addr a{htonl(0x0a000000 + i)};
    remembered += table.Remember(net::IpAddress::FromV4(a), Ep("10.0.0.1:80"),
                                 At(absl::ZeroDuration()), absl::Hours(1));
  }
  EXPECT_LE(table.size(), AffinityTable::kShards * AffinityTable::kMaxPerShard);
  EXPECT_LT(remembered, AffinityTable::kShards * AffinityTable::kMaxPerShard + 1000);
}

}  // namespace
}  // namespace sluice::proxy
