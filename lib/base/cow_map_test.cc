// SPDX-License-Identifier: Apache-2.0
#include "lib/base/cow_map.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

template <typename K, typename V>
std::map<K, V> Contents(const CowMap<K, V>& m) {
  return std::map<K, V>(m.begin(), m.end());
}

// Random inserts, overwrites and erases, checked against std::map after each step, across many
// chunk splits and removals; lookups at and between keys.
TEST(CowMapTest, BehavesAsAMap) {
  CowMap<int, int> m;
  std::map<int, int> want;
  std::mt19937 rng(7);
  for (int step = 0; step < 5000; ++step) {
    const int key = static_cast<int>(rng() % 1000) * 2;
    if (rng() % 3 == 0) {
      EXPECT_EQ(m.erase(key), want.erase(key) == 1);
    } else if (rng() % 2 == 0) {
      EXPECT_EQ(m.emplace(key, step), want.emplace(key, step).second);
    } else {
      m.insert_or_assign(key, step);
      want.insert_or_assign(key, step);
    }
    ASSERT_EQ(m.size(), want.size());
  }
  EXPECT_EQ(Contents(m), want);
  for (int key = -1; key < 2002; ++key) {
    auto got = m.lower_bound(key);
    auto expected = want.lower_bound(key);
    ASSERT_EQ(got == m.end(), expected == want.end()) << key;
    if (expected != want.end()) {
      EXPECT_EQ(got->first, expected->first);
    }
    EXPECT_EQ(m.contains(key), want.contains(key));
  }
  for (const auto& [key, value] : want) {
    m.erase(key);
  }
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.begin(), m.end());
}

// A copy is a snapshot: changes to either side never show in the other.
TEST(CowMapTest, CopiesAreSnapshots) {
  CowMap<std::string, int> m;
  for (int i = 0; i < 500; ++i) {
    m.insert_or_assign("k" + std::to_string(i), i);
  }
  const CowMap<std::string, int> snapshot = m;
  const std::map<std::string, int> before = Contents(snapshot);
  m.insert_or_assign("k1", -1);
  m.erase("k250");
  m.insert_or_assign("new", 1);
  EXPECT_EQ(Contents(snapshot), before);
  EXPECT_EQ(m.find("k1")->second, -1);
  EXPECT_FALSE(m.contains("k250"));
  EXPECT_EQ(m.size(), 500u);

  CowMap<std::string, int> copy = snapshot;
  copy.erase("k1");
  EXPECT_EQ(snapshot.find("k1")->second, 1);
  EXPECT_EQ(Contents(snapshot), before);
}

}  // namespace
}  // namespace sluice::base
