// SPDX-License-Identifier: Apache-2.0
#include "lib/net/address.h"

#include "gtest/gtest.h"

namespace sluice::net {
namespace {

TEST(AddressTest, ParsesAndFormats) {
  EXPECT_EQ(IpAddress::Parse("10.0.0.1")->ToString(), "10.0.0.1");
  EXPECT_EQ(IpAddress::Parse("fd00::1")->ToString(), "fd00::1");
  EXPECT_TRUE(IpAddress::Parse("::ffff:1.2.3.4")->is_v4());
  EXPECT_FALSE(IpAddress::Parse("10.0.0.256"));
  EXPECT_FALSE(IpAddress::Parse(""));
  EXPECT_FALSE(IpAddress::Parse("not-an-ip"));
  EXPECT_TRUE(IpAddress::Parse("127.0.0.5")->IsLoopback());
  EXPECT_EQ(SocketAddress::Parse("[::1]:80")->ToString(), "[::1]:80");
  EXPECT_EQ(SocketAddress::Parse("0.0.0.0:10256")->port(), 10256);
  EXPECT_FALSE(SocketAddress::Parse("::1:80"));
  EXPECT_FALSE(SocketAddress::Parse("1.2.3.4:70000"));
}

TEST(AddressTest, Cidr) {
  auto c = Cidr::Parse("10.1.0.0/16");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Contains(*IpAddress::Parse("10.1.255.3")));
  EXPECT_FALSE(c->Contains(*IpAddress::Parse("10.2.0.1")));
  EXPECT_FALSE(c->Contains(*IpAddress::Parse("fd00::1")));
  EXPECT_TRUE(Cidr::Parse("fd00::/7")->Contains(*IpAddress::Parse("fdff::1")));
  EXPECT_TRUE(Cidr::Parse("0.0.0.0/0")->Contains(*IpAddress::Parse("8.8.8.8")));
  EXPECT_FALSE(Cidr::Parse("10.0.0.0/33"));
  EXPECT_FALSE(Cidr::Parse("10.0.0.0"));
  EXPECT_EQ(Cidr::Parse("10.96.7.1/12")->Network().ToString(), "10.96.0.0/12");
  EXPECT_EQ(Cidr::Parse("10.96.7.1/32")->Network().ToString(), "10.96.7.1/32");
  EXPECT_EQ(Cidr::Parse("fd00:1:2::7/108")->Network().ToString(), "fd00:1:2::/108");
  EXPECT_EQ(Cidr::Parse("fd00::ffff:ffff/111")->Network().ToString(), "fd00::fffe:0/111");
  EXPECT_EQ(Cidr::Make(*IpAddress::Parse("10.96.0.0"), 12)->ToString(), "10.96.0.0/12");
  EXPECT_FALSE(Cidr::Make(*IpAddress::Parse("10.96.0.0"), 33));
  EXPECT_TRUE(Cidr::Make(*IpAddress::Parse("fd00::"), 128));
}

TEST(AddressTest, FromBytes) {
  const uint8_t v4[4] = {10, 96, 0, 1};
  EXPECT_EQ(IpAddress::FromBytes(AF_INET, v4, 4)->ToString(), "10.96.0.1");
  EXPECT_FALSE(IpAddress::FromBytes(AF_INET, v4, 3));
  EXPECT_FALSE(IpAddress::FromBytes(AF_INET6, v4, 4));
  uint8_t v6[16] = {0xfd};
  v6[15] = 7;
  EXPECT_EQ(IpAddress::FromBytes(AF_INET6, v6, 16)->ToString(), "fd00::7");
}

}  // namespace
}  // namespace sluice::net
