// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/allow_list.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::agent {
namespace {

net::SocketAddress A(const char* s) { return *net::SocketAddress::Parse(s); }

TEST(AllowListTest, EmptyAllowsAll) {
  auto l = AllowList::Parse({});
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->allow_all());
  EXPECT_TRUE(l->Allows(A("8.8.8.8:53")));
}

TEST(AllowListTest, CidrsAndPorts) {
  auto l = AllowList::Parse({"10.0.0.0/8", "192.168.1.0/24:443", "127.0.0.0/8:8000-9000",
                             "[fd00::/8]:10250", "2001:db8::/32"});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(l->Allows(A("10.1.2.3:1")));
  EXPECT_TRUE(l->Allows(A("192.168.1.7:443")));
  EXPECT_FALSE(l->Allows(A("192.168.1.7:80")));
  EXPECT_TRUE(l->Allows(A("127.0.0.1:8080")));
  EXPECT_FALSE(l->Allows(A("127.0.0.1:9001")));
  EXPECT_TRUE(l->Allows(A("[fd00::1]:10250")));
  EXPECT_FALSE(l->Allows(A("[fd00::1]:22")));
  EXPECT_TRUE(l->Allows(A("[2001:db8::5]:22")));
  EXPECT_FALSE(l->Allows(A("8.8.8.8:53")));
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
