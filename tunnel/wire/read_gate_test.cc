// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/read_gate.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::wire {
namespace {

TEST(ReadGateTest, HoldsParksAndResumes) {
  int reads = 0;
  auto gate = std::make_shared<ReadGate>([&reads] { ++reads; });
  gate->ReadNext();
  EXPECT_EQ(reads, 1);
  {
    GateHold a, b;
    a.Take(gate);
    b.Take(gate);
    a.Take(gate);  // idempotent
    gate->ReadNext();
    EXPECT_EQ(reads, 1);  // parked
    a.Release();
    EXPECT_EQ(reads, 1);  // b still holds
  }                       // b released by its destructor: the parked read starts
  EXPECT_EQ(reads, 2);
  GateHold late;
  late.Take(gate);
  late.Release();
  EXPECT_EQ(reads, 2);  // nothing was parked
}

TEST(ReadGateTest, CloseStopsReadsAndClaimsOnce) {
  int reads = 0;
  auto gate = std::make_shared<ReadGate>([&reads] { ++reads; });
  GateHold h;
  h.Take(gate);
  gate->ReadNext();
  EXPECT_TRUE(gate->Close());
  EXPECT_FALSE(gate->Close());
  h.Release();
  gate->ReadNext();
  EXPECT_EQ(reads, 0);
}

}  // namespace
}  // namespace sluice::tunnel::wire
