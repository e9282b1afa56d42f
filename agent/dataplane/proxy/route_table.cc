// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/route_table.h"

namespace sluice::proxy {

std::string ListenKey::ToString() const {
  return std::string(transport == Transport::kTcp ? "tcp/" : "udp/") + address.ToString();
}

bool SourceFilter::Contains(const net::IpAddress& source) const {
  for (const auto& cidr : allowed_) {
    if (cidr.Contains(source)) {
      return true;
    }
  }
  return false;
}

bool SourceFilter::Admit(const net::IpAddress& source) const {
  if (Contains(source)) {
    return true;
  }
  refused_.Inc();
  return false;
}

}  // namespace sluice::proxy
