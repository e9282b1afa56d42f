// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/allow_list.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "agent/base/strings.h"

namespace sluice::tunnel::agent {
namespace {

bool ParsePorts(std::string_view text, uint16_t* low, uint16_t* high) {
  std::vector<std::string> parts = absl::StrSplit(base::Absl(text), '-');
  uint32_t lo = 0;
  uint32_t hi = 0;
  if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &lo)) {
    hi = lo;
  } else if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) ||
             !absl::SimpleAtoi(parts[1], &hi)) {
    return false;
  }
  if (lo == 0 || hi > 65535 || lo > hi) {
    return false;
  }
  *low = static_cast<uint16_t>(lo);
  *high = static_cast<uint16_t>(hi);
  return true;
}

}  // namespace

absl::StatusOr<AllowList> AllowList::Parse(const std::vector<std::string>& entries) {
  AllowList list;
  for (const std::string& e : entries) {
    std::string_view cidr = e;
    std::string_view ports;
    if (!e.empty() && e.front() == '[') {
      const size_t close = e.find(']');
      if (close == std::string::npos || (close + 1 < e.size() && e[close + 1] != ':')) {
        return absl::InvalidArgumentError(
            absl::StrCat("--allowed-destinations: bad entry \"", e, "\""));
      }
      cidr = std::string_view(e).substr(1, close - 1);
      if (close + 2 <= e.size()) {
        ports = std::string_view(e).substr(close + 2);
      }
    } else if (e.find(':') != std::string::npos && e.find('.') != std::string::npos) {
      const size_t colon = e.rfind(':');
      cidr = std::string_view(e).substr(0, colon);
      ports = std::string_view(e).substr(colon + 1);
    }
    Rule rule;
    auto parsed = net::Cidr::Parse(cidr);
    if (!parsed || (!ports.empty() && !ParsePorts(ports, &rule.low, &rule.high))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--allowed-destinations: bad entry \"", e, "\" (want CIDR[:PORT[-PORT]])"));
    }
    rule.cidr = *parsed;
    list.rules_.push_back(rule);
  }
  return list;
}

bool AllowList::Allows(const net::SocketAddress& dest) const {
  if (rules_.empty()) {
    return true;
  }
  for (const Rule& r : rules_) {
    if (r.cidr.Contains(dest.ip()) && dest.port() >= r.low && dest.port() <= r.high) {
      return true;
    }
  }
  return false;
}

bool AllowList::MayAllowPort(uint16_t port) const {
  if (rules_.empty()) {
    return true;
  }
  for (const Rule& r : rules_) {
    if (port >= r.low && port <= r.high) {
      return true;
    }
  }
  return false;
}

}  // namespace sluice::tunnel::agent
