// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/fake_vip_manager.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::vip {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

net::IpAddress Ip(std::string_view text) { return *net::IpAddress::Parse(text); }

TEST(FakeVipManagerTest, RecordsCallsAndOwnsLikeTheRealOne) {
  FakeVipManager vips;
  vips.SetLocal(Ip("192.168.1.5"));
  EXPECT_TRUE(vips.Ensure(Ip("10.96.0.1")).ok());
  EXPECT_TRUE(vips.Ensure(Ip("192.168.1.5")).ok());
  EXPECT_THAT(vips.Owned(), UnorderedElementsAre(Ip("10.96.0.1")));

  EXPECT_TRUE(vips.Reconcile({Ip("10.96.0.2"), Ip("fd00::2"), Ip("192.168.1.5")}).ok());
  EXPECT_THAT(vips.Owned(), UnorderedElementsAre(Ip("10.96.0.2"), Ip("fd00::2")));

  vips.FailNextCall(absl::UnavailableError("injected"));
  EXPECT_EQ(vips.Release(Ip("10.96.0.2")).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(vips.Release(Ip("10.96.0.2")).ok());
  EXPECT_TRUE(vips.RemoveAll().ok());
  EXPECT_TRUE(vips.Owned().empty());
  EXPECT_EQ(vips.interface_name(), "fake0");

  EXPECT_THAT(vips.calls(), ElementsAre("Ensure(10.96.0.1)", "Ensure(192.168.1.5)",
                                        "Reconcile(10.96.0.2,192.168.1.5,fd00::2)",
                                        "Release(10.96.0.2)", "Release(10.96.0.2)", "RemoveAll()"));
}

}  // namespace
}  // namespace sluice::vip
