// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/allow_list.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::agent {
namespace {

using V = AllowList::Verdict;

net::SocketAddress A(const char* s) { return *net::SocketAddress::Parse(s); }

// Only 10.0.0.1 is the node's own address in these tests.
bool Local(const net::IpAddress& ip) { return ip == *net::IpAddress::Parse("10.0.0.1"); }

V Check(const AllowList& l, const char* dest) { return l.Check(A(dest), &Local); }
bool Allows(const AllowList& l, const char* dest) { return Check(l, dest) == V::kAllowed; }

TEST(AllowListTest, EmptyAllowsAllButTheNodesPrivateDestinations) {
  auto l = AllowList::Parse({}, {10256, 8094});
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->allow_all());
  EXPECT_TRUE(Allows(*l, "8.8.8.8:53"));
  EXPECT_TRUE(Allows(*l, "[2001:db8::1]:443"));
  EXPECT_EQ(Check(*l, "127.0.0.1:10250"), V::kLoopback);
  EXPECT_EQ(Check(*l, "127.9.9.9:80"), V::kLoopback);
  EXPECT_EQ(Check(*l, "0.0.0.0:80"), V::kLoopback);
  EXPECT_EQ(Check(*l, "[::1]:80"), V::kLoopback);
  EXPECT_EQ(Check(*l, "[::]:80"), V::kLoopback);
  EXPECT_EQ(Check(*l, "[::ffff:127.0.0.1]:80"), V::kLoopback);
  EXPECT_EQ(Check(*l, "169.254.169.254:80"), V::kLinkLocal);
  EXPECT_EQ(Check(*l, "[fe80::1]:80"), V::kLinkLocal);
  EXPECT_EQ(Check(*l, "[fd00:ec2::254]:80"), V::kLinkLocal);
  // Own ports on the node's addresses only: the same port elsewhere is someone else's.
  EXPECT_EQ(Check(*l, "10.0.0.1:10256"), V::kOwnPort);
  EXPECT_EQ(Check(*l, "10.0.0.1:8094"), V::kOwnPort);
  EXPECT_TRUE(Allows(*l, "10.0.0.1:10250"));
  EXPECT_TRUE(Allows(*l, "10.0.0.2:10256"));
}

TEST(AllowListTest, PrivateDestinationsOpenOnlyToEntriesNamingThem) {
  // Wide entries do not open them.
  auto wide = AllowList::Parse({"0.0.0.0/0", "::/0"}, {10256}).value();
  EXPECT_EQ(Check(wide, "127.0.0.1:80"), V::kLoopback);
  EXPECT_EQ(Check(wide, "169.254.169.254:80"), V::kLinkLocal);
  EXPECT_EQ(Check(wide, "[::1]:80"), V::kLoopback);
  EXPECT_EQ(Check(wide, "10.0.0.1:10256"), V::kOwnPort);
  EXPECT_TRUE(Allows(wide, "10.0.0.1:80"));
  // Entries inside the range (and naming the port, for own ports) do.
  auto named = AllowList::Parse({"127.0.0.1/32", "169.254.169.254/32:80", "[::1/128]:8080",
                                 "0.0.0.0/0", "10.0.0.1/32:10256"},
                                {10256})
                   .value();
  EXPECT_TRUE(Allows(named, "127.0.0.1:10250"));
  EXPECT_EQ(Check(named, "127.0.0.2:10250"), V::kLoopback);
  EXPECT_TRUE(Allows(named, "169.254.169.254:80"));
  EXPECT_EQ(Check(named, "169.254.169.254:443"), V::kLinkLocal);
  EXPECT_TRUE(Allows(named, "[::1]:8080"));
  EXPECT_TRUE(Allows(named, "10.0.0.1:10256"));
  // 127.0.0.1/32 names no port, so the own port on loopback stays closed.
  EXPECT_EQ(Check(named, "127.0.0.1:10256"), V::kLoopback);
}

TEST(AllowListTest, CidrsAndPorts) {
  auto l = AllowList::Parse({"10.0.0.0/8", "192.168.1.0/24:443", "127.0.0.0/8:8000-9000",
                             "[fd00::/8]:10250", "2001:db8::/32"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(Allows(*l, "10.1.2.3:1"));
  EXPECT_TRUE(Allows(*l, "192.168.1.7:443"));
  EXPECT_FALSE(Allows(*l, "192.168.1.7:80"));
  EXPECT_TRUE(Allows(*l, "127.0.0.1:8080"));
  EXPECT_FALSE(Allows(*l, "127.0.0.1:9001"));
  EXPECT_TRUE(Allows(*l, "[fd00::1]:10250"));
  EXPECT_FALSE(Allows(*l, "[fd00::1]:22"));
  EXPECT_TRUE(Allows(*l, "[2001:db8::5]:22"));
  EXPECT_FALSE(Allows(*l, "8.8.8.8:53"));
}

TEST(AllowListTest, MayAllowPort) {
  EXPECT_TRUE(AllowList::Parse({}).value().MayAllowPort(22));
  auto l = AllowList::Parse({"192.168.1.0/24:443", "127.0.0.0/8:8000-9000"}).value();
  EXPECT_TRUE(l.MayAllowPort(443));
  EXPECT_TRUE(l.MayAllowPort(8000));
  EXPECT_FALSE(l.MayAllowPort(22));
  EXPECT_TRUE(AllowList::Parse({"10.0.0.0/8"}).value().MayAllowPort(22));
}

TEST(AllowListTest, RejectsGarbage) {
  EXPECT_FALSE(AllowList::Parse({"nope"}).ok());
  EXPECT_FALSE(AllowList::Parse({"10.0.0.0/8:0"}).ok());
  EXPECT_FALSE(AllowList::Parse({"10.0.0.0/8:9-1"}).ok());
  EXPECT_FALSE(AllowList::Parse({"[fd00::/8"}).ok());
}

}  // namespace
}  // namespace sluice::tunnel::agent
