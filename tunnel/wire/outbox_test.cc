// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/outbox.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice::tunnel::wire {
namespace {

TEST(OutboxTest, ChargesTheByteBudgetUntilWrittenOrDiscarded) {
  ByteBudget budget(1);
  const size_t first = PacketBytes(MakeData(1, "abc"));
  const size_t second = PacketBytes(MakeData(1, "defg"));
  {
    int writes = 0;
    Outbox box([&writes](const Packet*) { ++writes; }, &budget);
    ASSERT_TRUE(box.Send(MakeData(1, "abc")));
    ASSERT_TRUE(box.Send(MakeData(1, "defg")));
    EXPECT_EQ(budget.used(), first + second);
    EXPECT_TRUE(budget.spent());
    EXPECT_TRUE(box.OnWriteDone(true));
    EXPECT_EQ(writes, 2);
    EXPECT_EQ(budget.used(), second);
    box.Close();  // the stream ends with "defg" still queued
  }
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_FALSE(budget.spent());
}

}  // namespace
}  // namespace sluice::tunnel::wire
