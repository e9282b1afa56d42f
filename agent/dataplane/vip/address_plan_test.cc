// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/address_plan.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::vip {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int kLo = 1;
constexpr int kEth0 = 2;

net::IpAddress Ip(std::string_view text) { return *net::IpAddress::Parse(text); }

KernelAddress Theirs(std::string_view ip, int ifindex, int prefix_len = 32) {
  return KernelAddress{.ip = Ip(ip), .ifindex = ifindex, .prefix_len = prefix_len};
}

KernelAddress Marked(std::string_view ip, int ifindex) {
  net::IpAddress address = Ip(ip);
  return KernelAddress{.ip = address,
                       .ifindex = ifindex,
                       .prefix_len = address.is_v4() ? 32 : 128,
                       .protocol = kAddressProtocol};
}

TEST(LabelForTest, FitsIfNameSize) {
  EXPECT_EQ(LabelFor("lo"), "lo:sluice");
  EXPECT_EQ(LabelFor("sluice0"), "sluice0:sluice");
  EXPECT_EQ(LabelFor("enp0s31f6"), "");  // 16 characters with the suffix.
}

TEST(IsOursTest, ByProtocolLabelOrThisRun) {
  const absl::flat_hash_set<net::IpAddress> none;
  EXPECT_TRUE(IsOurs(Marked("fd00::1", kEth0), kLo, none));
  EXPECT_FALSE(IsOurs(Theirs("10.0.0.1", kLo), kLo, none));

  KernelAddress labelled = Theirs("10.0.0.1", kEth0);
  labelled.label = "eth0:sluice";  // An earlier run on another interface, or a pre-5.18 kernel.
  EXPECT_TRUE(IsOurs(labelled, kLo, none));
  labelled.label = "eth0:other";
  EXPECT_FALSE(IsOurs(labelled, kLo, none));

  // Without marks (IPv6 before Linux 5.18), this run's adds count on the VIP link only.
  const absl::flat_hash_set<net::IpAddress> added = {Ip("fd00::2")};
  EXPECT_TRUE(IsOurs(Theirs("fd00::2", kLo, 128), kLo, added));
  EXPECT_FALSE(IsOurs(Theirs("fd00::2", kEth0, 128), kLo, added));
}

TEST(ClassifyTest, Presence) {
  const std::vector<KernelAddress> current = {Theirs("127.0.0.1", kLo, 8),
                                              Theirs("192.168.1.5", kEth0, 24),
                                              Marked("10.96.0.1", kLo), Marked("10.96.0.2", kEth0)};
  const absl::flat_hash_set<net::IpAddress> none;
  EXPECT_EQ(Classify(current, Ip("10.96.0.1"), kLo, none), Presence::kOursOnVipLink);
  EXPECT_EQ(Classify(current, Ip("10.96.0.2"), kLo, none), Presence::kOursElsewhere);
  EXPECT_EQ(Classify(current, Ip("192.168.1.5"), kLo, none), Presence::kLocal);
  EXPECT_EQ(Classify(current, Ip("127.0.0.1"), kLo, none), Presence::kLocal);
  EXPECT_EQ(Classify(current, Ip("127.0.0.53"), kLo, none), Presence::kLocal);  // 127/8 route.
  EXPECT_EQ(Classify(current, Ip("10.96.0.3"), kLo, none), Presence::kAbsent);
}

TEST(PlanReconcileTest, AddsMissingRemovesStaleKeepsOthers) {
  const std::vector<KernelAddress> current = {
      Theirs("127.0.0.1", kLo, 8),
      Theirs("10.96.0.77", kLo),   // Someone else's, not wanted: untouched.
      Theirs("10.96.0.5", kEth0),  // Someone else's, wanted: local already.
      Marked("10.96.0.1", kLo),    // Ours, wanted: kept.
      Marked("10.96.0.9", kLo),    // Ours, stale: removed.
      Marked("fd00::9", kLo),      // Ours (IPv6), stale: removed.
      Marked("10.96.0.2", kEth0),  // Ours on an old interface, wanted: moved.
  };
  const absl::flat_hash_set<net::IpAddress> wanted = {
      Ip("10.96.0.1"), Ip("10.96.0.2"), Ip("10.96.0.3"), Ip("10.96.0.5"),
      Ip("fd00::3"),   Ip("127.0.0.1"), Ip("0.0.0.0")};
  const ReconcilePlan plan = PlanReconcile(current, wanted, kLo, {});

  EXPECT_THAT(plan.add, ElementsAre(Ip("10.96.0.2"), Ip("10.96.0.3"), Ip("fd00::3")));
  std::vector<std::string> removed;
  for (const KernelAddress& address : plan.remove) {
    removed.push_back(absl::StrCat(address.ip.ToString(), "@", address.ifindex));
  }
  EXPECT_THAT(removed, ElementsAre("10.96.0.2@2", "10.96.0.9@1", "fd00::9@1"));
  EXPECT_THAT(plan.owned, UnorderedElementsAre(Ip("10.96.0.1"), Ip("10.96.0.2"), Ip("10.96.0.3"),
                                               Ip("fd00::3")));
  EXPECT_THAT(plan.rejected, ElementsAre(Ip("0.0.0.0")));
}

TEST(PlanReconcileTest, EmptyWantedRemovesOnlyOurs) {
  const std::vector<KernelAddress> current = {
      Theirs("10.96.0.77", kLo), Theirs("fd00::77", kLo, 128), Marked("10.96.0.1", kLo)};
  const ReconcilePlan plan = PlanReconcile(current, {}, kLo, {});
  EXPECT_THAT(plan.add, IsEmpty());
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].ip, Ip("10.96.0.1"));
  EXPECT_THAT(plan.owned, IsEmpty());
}

}  // namespace
}  // namespace sluice::vip
