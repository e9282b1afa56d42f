// SPDX-License-Identifier: Apache-2.0
#include "lib/net/socket.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "gtest/gtest.h"

namespace sluice::net {
namespace {

SocketAddress Addr(const char* text) { return *SocketAddress::Parse(text); }

// Waits (bounded) for a non-blocking connect to finish.
void WaitWritable(int fd) {
  pollfd p{.fd = fd, .events = POLLOUT};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
}

bool HaveIpv6() {
  base::UniqueFd fd(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  return fd.valid();
}

TEST(SocketTest, ListenDialAcceptOnLoopback) {
  auto listener = ListenTcp(Addr("127.0.0.1:0"), /*reuseport=*/false, 16);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto local = LocalAddress(listener->get());
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_NE(local->port(), 0);
  EXPECT_EQ(local->ip().ToString(), "127.0.0.1");

  auto dialed = DialTcp(*local);
  ASSERT_TRUE(dialed.ok()) << dialed.status();
  WaitWritable(dialed->get());
  EXPECT_EQ(SocketError(dialed->get()), 0);
  auto peer = PeerAddress(dialed->get());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*peer, *local);

  base::UniqueFd accepted(accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(accepted.valid());
  EXPECT_EQ(*PeerAddress(accepted.get()), *LocalAddress(dialed->get()));
  EXPECT_TRUE(SetTcpNoDelay(accepted.get()).ok());
  EXPECT_TRUE(SetLingerZero(accepted.get()).ok());
}

TEST(SocketTest, DialRefusedReportsThroughSocketError) {
  SocketAddress closed;
  {
    auto listener = ListenTcp(Addr("127.0.0.1:0"), false, 1);
    ASSERT_TRUE(listener.ok());
    closed = *LocalAddress(listener->get());
  }  // closed: nothing listens on that port now
  auto dialed = DialTcp(closed);
  ASSERT_TRUE(dialed.ok()) << dialed.status();  // EINPROGRESS counts as success
  WaitWritable(dialed->get());
  EXPECT_EQ(SocketError(dialed->get()), ECONNREFUSED);
  EXPECT_EQ(SocketError(dialed->get()), 0);  // SO_ERROR clears on read
}

TEST(SocketTest, FreebindAllowsAnAddressNotOnTheNode) {
  // 203.0.113.0/24 is TEST-NET-3: never assigned here, as a VIP before the VIP manager adds it.
  auto listener = ListenTcp(Addr("203.0.113.7:0"), false, 1);
  ASSERT_TRUE(listener.ok()) << listener.status();
  auto udp = BindUdp(Addr("203.0.113.7:0"), false);
  ASSERT_TRUE(udp.ok()) << udp.status();
}

TEST(SocketTest, ReusePortSharesAPortOnlyWhenAsked) {
  auto first = ListenTcp(Addr("127.0.0.1:0"), /*reuseport=*/true, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  SocketAddress addr = *LocalAddress(first->get());
  auto second = ListenTcp(addr, /*reuseport=*/true, 1);
  EXPECT_TRUE(second.ok()) << second.status();
  auto third = ListenTcp(addr, /*reuseport=*/false, 1);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("bind 127.0.0.1:"), absl::string_view::npos)
      << third.status();
}

TEST(SocketTest, Ipv6ListenerIsV6Only) {
  if (!HaveIpv6()) {
    GTEST_SKIP() << "no IPv6 in this kernel/namespace";
  }
  auto listener = ListenTcp(Addr("[::1]:0"), false, 1);
  ASSERT_TRUE(listener.ok()) << listener.status();
  int v6only = 0;
  socklen_t len = sizeof(v6only);
  ASSERT_EQ(getsockopt(listener->get(), IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len), 0);
  EXPECT_EQ(v6only, 1);
  EXPECT_TRUE(ListenTcp(Addr("[2001:db8::7]:0"), false, 1).ok());  // IPV6_FREEBIND
}

TEST(SocketTest, UdpReportsDestinationAddress) {
  auto server = BindUdp(Addr("127.0.0.1:0"), /*reuseport=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  SocketAddress addr = *LocalAddress(server->get());
  base::UniqueFd client(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss;
  socklen_t len = addr.ToSockaddr(&ss);
  ASSERT_EQ(sendto(client.get(), "ping", 4, 0, reinterpret_cast<sockaddr*>(&ss), len), 4);

  pollfd p{.fd = server->get(), .events = POLLIN};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  char data[16];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(in_pktinfo))];
  iovec iov{.iov_base = data, .iov_len = sizeof(data)};
  msghdr msg{
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof(control)};
  ASSERT_EQ(recvmsg(server->get(), &msg, 0), 4);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->cmsg_type, IP_PKTINFO);
  in_pktinfo info;
  memcpy(&info, CMSG_DATA(c), sizeof(info));
  EXPECT_EQ(IpAddress::FromV4(info.ipi_addr).ToString(), "127.0.0.1");
}

}  // namespace
}  // namespace sluice::net
