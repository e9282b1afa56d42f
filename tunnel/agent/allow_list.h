// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "lib/net/address.h"

namespace sluice::tunnel::agent {

// Destinations the agent may dial (--allowed-destinations). Entries are "CIDR",
// "CIDR:PORT" or "CIDR:LOW-HIGH"; IPv6 CIDRs with ports are bracketed: "[fd00::/8]:443".
// An empty list allows every destination except the node's private ones, as upstream
// proxy-agent allows all; the node's private ones are always denied unless an entry names
// them explicitly:
//  - loopback and unspecified addresses (127.0.0.0/8, 0.0.0.0/8, ::1, ::): host services,
//    kubelet, the agents' own admin ports; opened only by an entry whose CIDR lies inside
//    that range ("127.0.0.1/32:8080"), never by a wider one ("0.0.0.0/0");
//  - link-local addresses and cloud metadata (169.254.0.0/16, fe80::/10, fd00:ec2::254):
//    opened the same way ("169.254.169.254/32:80");
//  - the agent's own status ports on any of the node's addresses: opened only by an entry
//    that names the port ("10.0.0.0/8:10256").
// Value type.
class AllowList final {
 public:
  enum class Verdict { kAllowed, kNotListed, kLoopback, kLinkLocal, kOwnPort };
  // `own_ports`: the status ports of the process hosting the agent.
  static absl::StatusOr<AllowList> Parse(const std::vector<std::string>& entries,
                                         std::vector<uint16_t> own_ports = {});
  // `is_local` says whether an address is the node's own; it is asked only for own ports.
  Verdict Check(const net::SocketAddress& dest,
                absl::FunctionRef<bool(const net::IpAddress&)> is_local) const;
  // Whether some destination on `port` may be allowed: a host name whose port no entry allows
  // is refused without resolving it, so a denied dial never causes a DNS query.
  bool MayAllowPort(uint16_t port) const;
  bool allow_all() const { return rules_.empty(); }

 private:
  struct Rule {
    net::Cidr cidr;
    uint16_t low = 0;
    uint16_t high = 65535;
  };
  // Whether a rule allows `dest`, lies inside `within` (if set) and names ports (if asked).
  bool Match(const net::SocketAddress& dest, const net::Cidr* within, bool port_named) const;

  std::vector<Rule> rules_;
  std::vector<uint16_t> own_ports_;
};

// Metric label of a refusal ("not_listed", "loopback", "link_local", "own_port").
const char* VerdictLabel(AllowList::Verdict v);
// Whether `ip` is assigned to an interface of this network namespace (getifaddrs).
bool IsLocalAddress(const net::IpAddress& ip);

}  // namespace sluice::tunnel::agent
