// SPDX-License-Identifier: Apache-2.0
#include "lib/net/address.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::net {

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) {
    return std::nullopt;
  }
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  in_addr a4;
  if (inet_pton(AF_INET, buf, &a4) == 1) {
    return FromV4(a4);
  }
  in6_addr a6;
  if (inet_pton(AF_INET6, buf, &a6) == 1) {
    return FromV6(a6);
  }
  return std::nullopt;
}

IpAddress IpAddress::FromV4(in_addr a) {
  IpAddress ip;
  ip.family_ = AF_INET;
  ip.v4_ = a;
  return ip;
}

IpAddress IpAddress::FromV6(in6_addr a) {
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    in_addr a4;
    std::memcpy(&a4, &a.s6_addr[12], 4);
    return FromV4(a4);
  }
  IpAddress ip;
  ip.family_ = AF_INET6;
  ip.v6_ = a;
  return ip;
}

std::optional<IpAddress> IpAddress::FromBytes(int family, const void* data, size_t len) {
  if (family == AF_INET && len == sizeof(in_addr)) {
    in_addr v4;
    std::memcpy(&v4, data, sizeof(v4));
    return FromV4(v4);
  }
  if (family == AF_INET6 && len == sizeof(in6_addr)) {
    in6_addr v6;
    std::memcpy(&v6, data, sizeof(v6));
    return FromV6(v6);
  }
  return std::nullopt;
}

const uint8_t* IpAddress::bytes() const {
  return is_v4() ? reinterpret_cast<const uint8_t*>(&v4_) : v6_.s6_addr;
}

bool IpAddress::IsLoopback() const {
  return is_v4() ? (ntohl(v4_.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&v6_);
}

bool IpAddress::IsUnspecified() const {
  return is_v4() ? v4_.s_addr == 0 : IN6_IS_ADDR_UNSPECIFIED(&v6_);
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(family_, is_v4() ? static_cast<const void*>(&v4_) : &v6_, buf, sizeof(buf));
  return buf;
}

int IpAddress::Compare(const IpAddress& other) const {
  if (family_ != other.family_) {
    return family_ < other.family_ ? -1 : 1;
  }
  return std::memcmp(bytes(), other.bytes(), byte_length());
}

std::optional<Cidr> Cidr::Parse(std::string_view text) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return std::nullopt;
  }
  auto ip = IpAddress::Parse(text.substr(0, slash));
  int prefix;
  if (!ip || !absl::SimpleAtoi(base::Absl(text.substr(slash + 1)), &prefix)) {
    return std::nullopt;
  }
  return Make(*ip, prefix);
}

std::optional<Cidr> Cidr::Make(const IpAddress& base, int prefix) {
  if (prefix < 0 || prefix > base.byte_length() * 8) {
    return std::nullopt;
  }
  Cidr c;
  c.base_ = base;
  c.prefix_ = prefix;
  return c;
}

bool Cidr::Contains(const IpAddress& ip) const {
  if (ip.family() != base_.family()) {
    return false;
  }
  const uint8_t* a = ip.bytes();
  const uint8_t* b = base_.bytes();
  int full = prefix_ / 8;
  if (std::memcmp(a, b, full) != 0) {
    return false;
  }
  int rest = prefix_ % 8;
  if (rest == 0) {
    return true;
  }
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

Cidr Cidr::Network() const {
  uint8_t bytes[16] = {};
  const int len = base_.byte_length();
  std::memcpy(bytes, base_.bytes(), static_cast<size_t>(len));
  for (int bit = prefix_; bit < len * 8; ++bit) {
    bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  }
  Cidr c = *this;
  c.base_ = *IpAddress::FromBytes(base_.family(), bytes, static_cast<size_t>(len));
  return c;
}

std::string Cidr::ToString() const { return absl::StrCat(base_.ToString(), "/", prefix_); }

SocketAddress::SocketAddress(const IpAddress& ip, uint16_t port) : ip_(ip), port_(port) {}

std::optional<SocketAddress> SocketAddress::FromSockaddr(const sockaddr* sa, socklen_t len) {
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return SocketAddress(IpAddress::FromV4(in->sin_addr), ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return SocketAddress(IpAddress::FromV6(in6->sin6_addr), ntohs(in6->sin6_port));
  }
  return std::nullopt;
}

std::optional<SocketAddress> SocketAddress::Parse(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;  // an IPv6 host must be bracketed
  }
  int port;
  auto ip = IpAddress::Parse(host);
  if (!ip || !absl::SimpleAtoi(base::Absl(text.substr(colon + 1)), &port) || port < 0 ||
      port > 65535) {
    return std::nullopt;
  }
  return SocketAddress(*ip, static_cast<uint16_t>(port));
}

socklen_t SocketAddress::ToSockaddr(sockaddr_storage* storage) const {
  std::memset(storage, 0, sizeof(*storage));
  if (ip_.is_v4()) {
    auto* in = reinterpret_cast<sockaddr_in*>(storage);
    in->sin_family = AF_INET;
    in->sin_port = htons(port_);
    in->sin_addr = ip_.v4();
    return sizeof(sockaddr_in);
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(storage);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port_);
  in6->sin6_addr = ip_.v6();
  return sizeof(sockaddr_in6);
}

std::string SocketAddress::ToString() const {
  return ip_.is_v4() ? absl::StrCat(ip_.ToString(), ":", port_)
                     : absl::StrCat("[", ip_.ToString(), "]:", port_);
}

}  // namespace sluice::net
