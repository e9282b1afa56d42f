// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "agent/net/address.h"

namespace sluice::tunnel::agent {

// Destinations the agent may dial (--allowed-destinations). Entries are "CIDR",
// "CIDR:PORT" or "CIDR:LOW-HIGH"; IPv6 CIDRs with ports are bracketed: "[fd00::/8]:443".
// An empty list allows every destination: that is upstream proxy-agent's behaviour and the
// default, so a drop-in replacement keeps working. Value type.
class AllowList final {
 public:
  static absl::StatusOr<AllowList> Parse(const std::vector<std::string>& entries);
  bool Allows(const net::SocketAddress& dest) const;
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
  std::vector<Rule> rules_;
};

}  // namespace sluice::tunnel::agent
