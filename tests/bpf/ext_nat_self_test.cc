// SPDX-License-Identifier: Apache-2.0
// ExtNat's startup self-test on the real kernel: it passes here (CI's kernel has tc BPF), leaves
// nothing behind in the test's namespace, and can run again at once.
#include <net/if.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "tests/testutil/netns.h"

namespace sluice::extnat {
namespace {

TEST(ExtNatSelfTest, PassesAndLeavesNothingBehind) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root";
  }
  // In a namespace of the test's own, to see that the self-test's devices are not made here.
  auto ns = testutil::NetNs::Create();
  ASSERT_TRUE(ns.ok()) << ns.status();
  for (int run = 0; run < 2; ++run) {
    const absl::Status st = SelfTest();
    ASSERT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(if_nametoindex("sluice-st0"), 0u);
  EXPECT_EQ(if_nametoindex("sluice-st1"), 0u);
}

}  // namespace
}  // namespace sluice::extnat
