// SPDX-License-Identifier: Apache-2.0
#include "agent/proxy/route_table.h"

namespace sluice::proxy {

std::string ListenKey::ToString() const {
  return std::string(transport == Transport::kTcp ? "tcp/" : "udp/") + address.ToString();
}

}  // namespace sluice::proxy
