// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/port_counters.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::proxier {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

// Sums `names` (name, count) as a consumer's ForEachCounter would hand them.
std::vector<std::pair<std::string, int>> Sum(
    const std::vector<std::pair<std::string, int>>& names) {
  std::vector<std::pair<std::string, int>> out;
  SumByPort<int>(
      [&](auto&& each) {
        for (const auto& [name, n] : names) {
          each(name, n);
        }
      },
      [](int& sum, const int& n) { sum += n; },
      [&](std::string_view port, const int& sum) { out.emplace_back(std::string(port), sum); });
  return out;
}

TEST(SumByPortTest, SumsEachPortsNamesOnce) {
  EXPECT_THAT(Sum({{"ns/a:p/TCP#c4", 1},
                   {"ns/a:p/TCP#c6", 2},
                   {"ns/a:p/TCP#e4", 4},
                   {"ns/a:q/TCP#c4", 8},
                   {"ns/b:p/UDP#4", 16}}),
              ElementsAre(Pair("ns/a:p/TCP", 7), Pair("ns/a:q/TCP", 8), Pair("ns/b:p/UDP", 16)));
}

TEST(SumByPortTest, ZeroCountsStillListThePort) {
  EXPECT_THAT(Sum({{"ns/a:p/TCP#c4", 0}}), ElementsAre(Pair("ns/a:p/TCP", 0)));
  EXPECT_THAT(Sum({}), IsEmpty());
}

TEST(SumByPortTest, PortOfDropsTheKernelSuffix) {
  EXPECT_EQ(PortOf("ns/a:p/TCP#e6"), "ns/a:p/TCP");
  EXPECT_EQ(PortOf("ns/a:p/TCP"), "ns/a:p/TCP");  // no suffix: the name is the port
}

}  // namespace
}  // namespace sluice::proxier
