// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/model.h"

namespace sluice::config {

const char* ProtocolName(Protocol p) {
  switch (p) {
    case Protocol::kTcp:
      return "TCP";
    case Protocol::kUdp:
      return "UDP";
    case Protocol::kSctp:
      return "SCTP";
  }
  return "?";
}

}  // namespace sluice::config
