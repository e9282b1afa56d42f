// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_flow_table.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::proxy {
namespace {

net::IpAddress Ip(const char* text) { return *net::IpAddress::Parse(text); }

// A flow that records its eviction and erases itself, as UdpProxy's does.
class FakeFlow final : public UdpFlowTable::Entry {
 public:
  FakeFlow(UdpFlowTable& table, const char* source, std::vector<std::string>& evicted,
           std::string name)
      : Entry(Ip(source)), table_(table), evicted_(evicted), name_(std::move(name)) {}
  ~FakeFlow() override { table_.Erase(*this); }

 private:
  void Evict() override {
    evicted_.push_back(name_);
    table_.Erase(*this);
  }
  UdpFlowTable& table_;
  std::vector<std::string>& evicted_;
  const std::string name_;
};

class UdpFlowTableTest : public ::testing::Test {
 protected:
  // Admits and inserts a flow of `source`; null if not admitted.
  FakeFlow* Open(UdpFlowTable& table, const char* source, const std::string& name) {
    if (table.Admit(Ip(source)) != UdpFlowTable::Admission::kAdmitted) {
      return nullptr;
    }
    flows_.push_back(std::make_unique<FakeFlow>(table, source, evicted_, name));
    table.Insert(*flows_.back());
    return flows_.back().get();
  }

  UdpFlowTable& Make(size_t max_flows, size_t max_per_source, FdBudget* fds = nullptr) {
    table_ = std::make_unique<UdpFlowTable>(max_flows, max_per_source, fds);
    return *table_;
  }

  FdBudget fds_{3};
  std::unique_ptr<UdpFlowTable> table_;
  std::vector<std::string> evicted_;
  std::vector<std::unique_ptr<FakeFlow>> flows_;  // last: closes before the table goes
};

TEST_F(UdpFlowTableTest, FullTableEvictsTheLeastRecentlyUsed) {
  UdpFlowTable& table = Make(/*max_flows=*/3, /*max_per_source=*/10);
  FakeFlow* a = Open(table, "10.0.0.1", "a");
  ASSERT_NE(Open(table, "10.0.0.2", "b"), nullptr);
  ASSERT_NE(Open(table, "10.0.0.3", "c"), nullptr);
  table.Touch(*a);  // b is now the oldest
  ASSERT_NE(Open(table, "10.0.0.4", "d"), nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"b"});
  ASSERT_NE(Open(table, "10.0.0.5", "e"), nullptr);
  EXPECT_EQ(evicted_, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(table.evictions(), 2u);
  EXPECT_EQ(table.FlowsOf(Ip("10.0.0.2")), 0u);
}

// A client at its cap gives up its own flow idle the longest; nobody else's.
TEST_F(UdpFlowTableTest, SourceCapEvictsThatSourcesOldestFlow) {
  UdpFlowTable& table = Make(/*max_flows=*/100, /*max_per_source=*/2);
  FakeFlow* a1 = Open(table, "10.0.0.1", "a1");
  ASSERT_NE(Open(table, "10.0.0.2", "b"), nullptr);
  ASSERT_NE(Open(table, "10.0.0.1", "a2"), nullptr);
  table.Touch(*a1);  // a2 is now 10.0.0.1's oldest; b is the table's
  ASSERT_NE(Open(table, "10.0.0.1", "a3"), nullptr);
  EXPECT_EQ(evicted_, std::vector<std::string>{"a2"});
  EXPECT_EQ(table.FlowsOf(Ip("10.0.0.1")), 2u);
  EXPECT_EQ(table.FlowsOf(Ip("10.0.0.2")), 1u);
  EXPECT_EQ(table.size(), 3u);
}

TEST_F(UdpFlowTableTest, SpentDescriptorBudgetEvictsThenRefuses) {
  FdBudget& fds = fds_;  // a limit of 3
  UdpFlowTable& table = Make(/*max_flows=*/100, /*max_per_source=*/100, &fds);
  ASSERT_NE(Open(table, "10.0.0.1", "a"), nullptr);
  fds.Take(2);                                       // another worker holds the rest
  ASSERT_NE(Open(table, "10.0.0.2", "b"), nullptr);  // a's descriptor makes room
  EXPECT_EQ(evicted_, std::vector<std::string>{"a"});
  EXPECT_EQ(fds.used(), 3);
  flows_.clear();  // b closes and gives its descriptor back
  EXPECT_EQ(fds.used(), 2);
  fds.Take(1);
  EXPECT_EQ(table.Admit(Ip("10.0.0.3")), UdpFlowTable::Admission::kNoDescriptor);
}

TEST(SourceCounterTest, CountsPerSourceUpToTheCap) {
  SourceCounter counter(2);
  EXPECT_TRUE(counter.TryAdd(Ip("10.0.0.1")));
  EXPECT_TRUE(counter.TryAdd(Ip("10.0.0.1")));
  EXPECT_FALSE(counter.TryAdd(Ip("10.0.0.1")));
  EXPECT_TRUE(counter.TryAdd(Ip("fd00::1")));
  counter.Remove(Ip("10.0.0.1"));
  EXPECT_TRUE(counter.TryAdd(Ip("10.0.0.1")));
  counter.Remove(Ip("10.0.0.1"));
  counter.Remove(Ip("10.0.0.1"));
  EXPECT_EQ(counter.Count(Ip("10.0.0.1")), 0u);
  EXPECT_EQ(counter.sources(), 1u);
}

TEST(FdBudgetTest, ReserveLeavesAtLeastHalf) {
  const int64_t all = FdBudget::ForProcess(0);
  EXPECT_EQ(FdBudget::ForProcess(all * 4), all / 2);
  EXPECT_EQ(FdBudget::ForProcess(1), all - 1);
}

}  // namespace
}  // namespace sluice::proxy
