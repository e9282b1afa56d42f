// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/allow_list.h"

#include <ifaddrs.h>

#include <algorithm>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/strings.h"

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

struct SpecialRange {
  net::Cidr cidr;
  AllowList::Verdict verdict;
};

// The node's private destinations (class comment in allow_list.h). 0.0.0.0 and :: count as
// loopback: connect(2) to them reaches the host's own listeners. fd00:ec2::254 is EC2's IPv6
// instance metadata address (a ULA, so no link-local range covers it).
const std::vector<SpecialRange>& SpecialRanges() {
  static const auto* ranges = new std::vector<SpecialRange>([] {
    std::vector<SpecialRange> out;
    for (const char* c : {"127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"}) {
      out.push_back({*net::Cidr::Parse(c), AllowList::Verdict::kLoopback});
    }
    for (const char* c : {"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"}) {
      out.push_back({*net::Cidr::Parse(c), AllowList::Verdict::kLinkLocal});
    }
    return out;
  }());
  return *ranges;
}

const SpecialRange* SpecialRangeOf(const net::IpAddress& ip) {
  for (const SpecialRange& r : SpecialRanges()) {
    if (r.cidr.Contains(ip)) {
      return &r;
    }
  }
  return nullptr;
}

bool Inside(const net::Cidr& inner, const net::Cidr& outer) {
  return inner.prefix() >= outer.prefix() && outer.Contains(inner.base());
}

}  // namespace

const char* VerdictLabel(AllowList::Verdict v) {
  switch (v) {
    case AllowList::Verdict::kAllowed:
      return "allowed";
    case AllowList::Verdict::kNotListed:
      return "not_listed";
    case AllowList::Verdict::kLoopback:
      return "loopback";
    case AllowList::Verdict::kLinkLocal:
      return "link_local";
    case AllowList::Verdict::kOwnPort:
      return "own_port";
  }
  return "unknown";
}

bool IsLocalAddress(const net::IpAddress& ip) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return true;  // cannot tell: treat as local, so an own port stays closed
  }
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, &freeifaddrs);
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) {
      continue;
    }
    const socklen_t len =
        a->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    auto addr = net::SocketAddress::FromSockaddr(a->ifa_addr, len);
    if (addr && addr->ip() == ip) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<AllowList> AllowList::Parse(const std::vector<std::string>& entries,
                                           std::vector<uint16_t> own_ports) {
  AllowList list;
  list.own_ports_ = std::move(own_ports);
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

bool AllowList::Match(const net::SocketAddress& dest, const net::Cidr* within,
                      bool port_named) const {
  for (const Rule& r : rules_) {
    // A rule without ports has low == 0.
    if (r.cidr.Contains(dest.ip()) && dest.port() >= r.low && dest.port() <= r.high &&
        (within == nullptr || Inside(r.cidr, *within)) && (!port_named || r.low != 0)) {
      return true;
    }
  }
  return false;
}

AllowList::Verdict AllowList::Check(const net::SocketAddress& dest,
                                    absl::FunctionRef<bool(const net::IpAddress&)> is_local) const {
  const SpecialRange* special = SpecialRangeOf(dest.ip());
  const bool own_port =
      std::find(own_ports_.begin(), own_ports_.end(), dest.port()) != own_ports_.end() &&
      (special != nullptr || is_local(dest.ip()));
  if (rules_.empty() && special == nullptr && !own_port) {
    return Verdict::kAllowed;
  }
  if (Match(dest, special != nullptr ? &special->cidr : nullptr, own_port)) {
    return Verdict::kAllowed;
  }
  if (special != nullptr) {
    return special->verdict;
  }
  return own_port ? Verdict::kOwnPort : Verdict::kNotListed;
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
