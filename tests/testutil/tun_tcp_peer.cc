// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/tun_tcp_peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/status.h"

namespace sluice::testutil {
namespace {

constexpr char kDevice[] = "sluicetun0";
constexpr size_t kIpHeader = 20;  // no IP options
constexpr size_t kTcpHeader = 20;

void Put16(std::string& s, size_t at, uint16_t v) {
  s[at] = static_cast<char>(v >> 8);
  s[at + 1] = static_cast<char>(v);
}

void Put32(std::string& s, size_t at, uint32_t v) {
  Put16(s, at, static_cast<uint16_t>(v >> 16));
  Put16(s, at + 2, static_cast<uint16_t>(v));
}

uint16_t Get16(std::string_view s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) << 8 | static_cast<uint8_t>(s[at + 1]));
}

uint32_t Get32(std::string_view s, size_t at) {
  return static_cast<uint32_t>(Get16(s, at)) << 16 | Get16(s, at + 2);
}

uint32_t ParseIp(const char* text) {
  in_addr a{};
  inet_pton(AF_INET, text, &a);
  return ntohl(a.s_addr);
}

// Gives the device its address and brings it up; the kernel adds the /24 route itself.
absl::Status ConfigureDevice() {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket(AF_INET)");
  }
  ifreq request{};
  strncpy(request.ifr_name, kDevice, IFNAMSIZ - 1);
  auto* addr = reinterpret_cast<sockaddr_in*>(&request.ifr_addr);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(ParseIp(TunTcpPeer::kLocalAddress));
  if (ioctl(fd.get(), SIOCSIFADDR, &request) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(SIOCSIFADDR ", kDevice, ")"));
  }
  addr->sin_addr.s_addr = htonl(0xffffff00);
  if (ioctl(fd.get(), SIOCSIFNETMASK, &request) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(SIOCSIFNETMASK ", kDevice, ")"));
  }
  if (ioctl(fd.get(), SIOCGIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(SIOCGIFFLAGS ", kDevice, ")"));
  }
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  if (ioctl(fd.get(), SIOCSIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(SIOCSIFFLAGS ", kDevice, " up)"));
  }
  return absl::OkStatus();
}

}  // namespace

uint16_t InternetChecksum(std::string_view data) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < data.size(); i += 2) {
    sum += Get16(data, i);
  }
  if (data.size() % 2 != 0) {
    sum += static_cast<uint32_t>(static_cast<uint8_t>(data.back())) << 8;
  }
  while (sum >> 16 != 0) {
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return static_cast<uint16_t>(~sum);
}

std::string BuildTcpPacket(const TcpSegment& s) {
  const size_t tcp_len = kTcpHeader + s.options.size() + s.payload.size();
  std::string tcp(kTcpHeader, '\0');
  Put16(tcp, 0, s.src_port);
  Put16(tcp, 2, s.dst_port);
  Put32(tcp, 4, s.seq);
  Put32(tcp, 8, s.ack);
  tcp[12] = static_cast<char>((kTcpHeader + s.options.size()) / 4 << 4);
  tcp[13] = static_cast<char>(s.flags);
  Put16(tcp, 14, s.window);
  tcp += s.options;
  tcp += s.payload;
  // RFC 793 3.1: the checksum covers a pseudo-header of addresses, protocol and length.
  std::string pseudo(12, '\0');
  Put32(pseudo, 0, s.src);
  Put32(pseudo, 4, s.dst);
  Put16(pseudo, 8, IPPROTO_TCP);
  Put16(pseudo, 10, static_cast<uint16_t>(tcp_len));
  Put16(tcp, 16, InternetChecksum(pseudo + tcp));

  std::string ip(kIpHeader, '\0');
  ip[0] = 0x45;  // version 4, 5 words
  Put16(ip, 2, static_cast<uint16_t>(kIpHeader + tcp_len));
  Put16(ip, 6, 0x4000);  // DF
  ip[8] = 64;            // TTL
  ip[9] = IPPROTO_TCP;
  Put32(ip, 12, s.src);
  Put32(ip, 16, s.dst);
  Put16(ip, 10, InternetChecksum(ip));
  return ip + tcp;
}

std::optional<TcpSegment> ParseTcpPacket(std::string_view p) {
  if (p.size() < kIpHeader || (p[0] >> 4) != 4 || p[9] != IPPROTO_TCP) {
    return std::nullopt;
  }
  const size_t ip_len = static_cast<size_t>(p[0] & 0xf) * 4;
  const size_t total = std::min<size_t>(Get16(p, 2), p.size());
  if (ip_len < kIpHeader || total < ip_len + kTcpHeader) {
    return std::nullopt;
  }
  std::string_view tcp = p.substr(ip_len, total - ip_len);
  const size_t tcp_len = static_cast<size_t>(static_cast<uint8_t>(tcp[12]) >> 4) * 4;
  if (tcp_len < kTcpHeader || tcp_len > tcp.size()) {
    return std::nullopt;
  }
  TcpSegment s;
  s.src = Get32(p, 12);
  s.dst = Get32(p, 16);
  s.src_port = Get16(tcp, 0);
  s.dst_port = Get16(tcp, 2);
  s.seq = Get32(tcp, 4);
  s.ack = Get32(tcp, 8);
  s.flags = static_cast<uint8_t>(tcp[13]);
  s.window = Get16(tcp, 14);
  s.options = std::string(tcp.substr(kTcpHeader, tcp_len - kTcpHeader));
  s.payload = std::string(tcp.substr(tcp_len));
  return s;
}

absl::StatusOr<std::unique_ptr<TunTcpPeer>> TunTcpPeer::Create() {
  base::UniqueFd tun(open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK));
  if (!tun) {
    return base::ErrnoStatus(errno, "open /dev/net/tun");
  }
  ifreq request{};
  request.ifr_flags = IFF_TUN | IFF_NO_PI;  // bare IP packets
  strncpy(request.ifr_name, kDevice, IFNAMSIZ - 1);
  if (ioctl(tun.get(), TUNSETIFF, &request) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(TUNSETIFF ", kDevice, ")"));
  }
  RETURN_IF_ERROR(ConfigureDevice());
  return std::unique_ptr<TunTcpPeer>(new TunTcpPeer(std::move(tun)));
}

absl::StatusOr<TunTcpPeer::Flow> TunTcpPeer::Connect(uint16_t port, uint16_t remote_port,
                                                     uint32_t isn, absl::Duration timeout) {
  Flow flow{.port = port, .remote_port = remote_port, .isn = isn};
  TcpSegment syn{.src = ParseIp(kPeerAddress),
                 .dst = ParseIp(kLocalAddress),
                 .src_port = port,
                 .dst_port = remote_port,
                 .seq = isn,
                 .flags = TH_SYN};
  // MSS 1460; NOP, NOP, SACK permitted (RFC 2018).
  syn.options = std::string("\x02\x04\x05\xb4\x01\x01\x04\x02", 8);
  RETURN_IF_ERROR(Write(syn));
  absl::StatusOr<TcpSegment> syn_ack = Await(
      port, remote_port,
      [&](const TcpSegment& s) {
        return (s.flags & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK) && s.ack == isn + 1;
      },
      timeout);
  if (!syn_ack.ok()) {
    return syn_ack.status();
  }
  flow.remote_isn = syn_ack->seq;
  RETURN_IF_ERROR(Write({.src = syn.src,
                         .dst = syn.dst,
                         .src_port = port,
                         .dst_port = remote_port,
                         .seq = isn + 1,
                         .ack = flow.remote_isn + 1,
                         .flags = TH_ACK}));
  return flow;
}

absl::Status TunTcpPeer::Send(const Flow& flow, uint32_t offset, std::string_view bytes) {
  return Write({.src = ParseIp(kPeerAddress),
                .dst = ParseIp(kLocalAddress),
                .src_port = flow.port,
                .dst_port = flow.remote_port,
                .seq = flow.isn + 1 + offset,
                .ack = flow.remote_isn + 1,
                .flags = TH_ACK | TH_PUSH,
                .payload = std::string(bytes)});
}

absl::Status TunTcpPeer::WaitForAck(const Flow& flow, uint32_t offset, absl::Duration timeout) {
  const uint32_t want = flow.isn + 1 + offset;
  return Await(
             flow.port, flow.remote_port,
             [&](const TcpSegment& s) {
               return (s.flags & TH_ACK) != 0 && static_cast<int32_t>(s.ack - want) >= 0;
             },
             timeout)
      .status();
}

absl::StatusOr<TcpSegment> TunTcpPeer::Await(uint16_t port, uint16_t remote_port,
                                             absl::FunctionRef<bool(const TcpSegment&)> match,
                                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buf[1 << 16];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("await segment from ", kLocalAddress, ":",
                                                      remote_port, " to port ", port,
                                                      ": none matched in time"));
    }
    pollfd p{.fd = tun_.get(), .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) < 0 && errno != EINTR) {
      return base::ErrnoStatus(errno, "poll(tun)");
    }
    const ssize_t n = read(tun_.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        continue;
      }
      return base::ErrnoStatus(errno, "read(tun)");
    }
    // IPv6 router solicitations and other flows' segments come here too.
    std::optional<TcpSegment> got = ParseTcpPacket(std::string_view(buf, static_cast<size_t>(n)));
    if (got && got->src_port == remote_port && got->dst_port == port && match(*got)) {
      return *std::move(got);
    }
  }
}

absl::Status TunTcpPeer::Write(const TcpSegment& segment) {
  const std::string packet = BuildTcpPacket(segment);
  // A TUN write is one packet, taken whole or refused.
  if (write(tun_.get(), packet.data(), packet.size()) != static_cast<ssize_t>(packet.size())) {
    return base::ErrnoStatus(errno, "write(tun)");
  }
  return absl::OkStatus();
}

}  // namespace sluice::testutil
