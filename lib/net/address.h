// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::net {

// An IPv4 or IPv6 address. IPv4-mapped IPv6 input is normalised to IPv4. Value type.
class IpAddress final {
 public:
  IpAddress() = default;
  static std::optional<IpAddress> Parse(std::string_view text);
  static IpAddress FromV4(in_addr a);
  static IpAddress FromV6(in6_addr a);
  // Network-order bytes as the kernel reports them (netlink attributes); nullopt unless `len`
  // is 4 for AF_INET or 16 for AF_INET6.
  static std::optional<IpAddress> FromBytes(int family, const void* data, size_t len);

  int family() const { return family_; }
  bool is_v4() const { return family_ == AF_INET; }
  const in_addr& v4() const { return v4_; }
  const in6_addr& v6() const { return v6_; }
  bool IsLoopback() const;
  bool IsUnspecified() const;
  std::string ToString() const;
  // Network-order bytes: 4 for IPv4, 16 for IPv6.
  const uint8_t* bytes() const;
  int byte_length() const { return is_v4() ? 4 : 16; }

  friend bool operator==(const IpAddress& a, const IpAddress& b) { return a.Compare(b) == 0; }
  friend std::strong_ordering operator<=>(const IpAddress& a, const IpAddress& b) {
    return a.Compare(b) <=> 0;
  }
  template <typename H>
  friend H AbslHashValue(H h, const IpAddress& a) {
    return H::combine_contiguous(std::move(h), a.bytes(), a.byte_length());
  }

 private:
  int Compare(const IpAddress& other) const;

  int family_ = AF_INET;
  in_addr v4_{};
  in6_addr v6_{};
};

// "10.0.0.0/8" or "fd00::/64". Value type.
class Cidr final {
 public:
  static std::optional<Cidr> Parse(std::string_view text);
  // nullopt when `prefix` is out of range for the family.
  static std::optional<Cidr> Make(const IpAddress& base, int prefix);
  bool Contains(const IpAddress& ip) const;
  const IpAddress& base() const { return base_; }
  int prefix() const { return prefix_; }
  // The same range with the host bits of base() cleared ("10.96.0.1/12" -> "10.96.0.0/12").
  Cidr Network() const;
  std::string ToString() const;
  friend bool operator==(const Cidr&, const Cidr&) = default;

 private:
  IpAddress base_;
  int prefix_ = 0;
};

// An IP and port as the kernel wants it.
class SocketAddress final {
 public:
  SocketAddress() = default;
  SocketAddress(const IpAddress& ip, uint16_t port);
  static std::optional<SocketAddress> FromSockaddr(const sockaddr* sa, socklen_t len);
  // "1.2.3.4:80" or "[::1]:80".
  static std::optional<SocketAddress> Parse(std::string_view text);

  const IpAddress& ip() const { return ip_; }
  uint16_t port() const { return port_; }
  // Fills storage and returns the length to pass to bind/connect.
  socklen_t ToSockaddr(sockaddr_storage* storage) const;
  std::string ToString() const;
  friend bool operator==(const SocketAddress&, const SocketAddress&) = default;
  friend auto operator<=>(const SocketAddress&, const SocketAddress&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const SocketAddress& a) {
    return H::combine(std::move(h), a.ip_, a.port_);
  }

 private:
  IpAddress ip_;
  uint16_t port_ = 0;
};

}  // namespace sluice::net
