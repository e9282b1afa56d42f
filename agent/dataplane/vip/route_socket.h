// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/net/address.h"

// Only vip/*.cc include libnl headers; this header names the socket type and nothing else.
struct nl_sock;

namespace sluice::vip {

// One interface address as an RTM_GETADDR dump reports it.
struct KernelAddress {
  net::IpAddress ip;
  int ifindex = 0;
  int prefix_len = 0;
  std::string label;     // IFA_LABEL; IPv4 only.
  uint8_t protocol = 0;  // IFA_PROTO (Linux >= 5.18); 0 when unset or unsupported.
};

// What AddAddress installs besides the address itself.
struct AddressOptions {
  std::string label;     // IPv4 only; empty = the kernel's default (the interface name).
  uint8_t protocol = 0;  // IFA_PROTO, 0 = none.
  int scope = 0;         // RT_SCOPE_*; IPv4 only (IPv6 derives scope from the address).
  uint32_t flags = 0;    // IFA_F_*.
};

// An rtnetlink (NETLINK_ROUTE) socket with the few requests that VIP management needs. It is
// bound to the network namespace of the thread that created it. Owns the libnl socket.
// Thread: control plane, one caller at a time.
class RouteSocket final {
 public:
  static absl::StatusOr<std::unique_ptr<RouteSocket>> Create();
  ~RouteSocket();
  RouteSocket(const RouteSocket&) = delete;
  RouteSocket& operator=(const RouteSocket&) = delete;

  // NotFound when there is no link called `name`.
  absl::StatusOr<int> LinkIndex(const std::string& name);
  // Creates a link of the given kind ("dummy"). Unimplemented when the kernel has no such kind
  // (EOPNOTSUPP), AlreadyExists when the name is taken.
  absl::Status AddLink(const std::string& name, const std::string& kind);
  // Sets IFF_UP. Returns true if the link was down.
  absl::StatusOr<bool> SetUp(const std::string& name);

  // Every address of every link, both families.
  absl::StatusOr<std::vector<KernelAddress>> DumpAddresses();
  // Adds ip/prefix_len on ifindex. AlreadyExists if that link already has it.
  absl::Status AddAddress(int ifindex, const net::IpAddress& ip, int prefix_len,
                          const AddressOptions& options);
  absl::Status DeleteAddress(const KernelAddress& address);

  // A `local` route for `range` (a network address) in table local, scope host, marked with
  // `protocol` (rtm_protocol): every address in it is delivered locally, as if each were on the
  // link (AnyIP). AlreadyExists if the route is there.
  absl::Status AddLocalRoute(int ifindex, const net::Cidr& range, uint8_t protocol);
  // NotFound if it is not there.
  absl::Status DeleteLocalRoute(int ifindex, const net::Cidr& range, uint8_t protocol);
  // The `local` routes in table local marked with `protocol`, with their ifindex.
  absl::StatusOr<std::vector<std::pair<int, net::Cidr>>> DumpLocalRoutes(uint8_t protocol);

 private:
  struct Free {
    void operator()(nl_sock* sock) const;
  };
  explicit RouteSocket(std::unique_ptr<nl_sock, Free> sock) : sock_(std::move(sock)) {}

  std::unique_ptr<nl_sock, Free> sock_;
};

}  // namespace sluice::vip
