// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/links.h"

#include <cctype>

#include "absl/strings/str_split.h"

namespace sluice::tunnel::server {
namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string StripBrackets(std::string s) {
  if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
    return s.substr(1, s.size() - 2);
  }
  return s;
}

}  // namespace

AgentIdentifiers ParseAgentIdentifiers(const std::string& query) {
  AgentIdentifiers ids;
  for (absl::string_view part : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    const std::string key = PercentDecode(kv.first);
    const std::string value = PercentDecode(kv.second);
    if (key == "host" || key == "ipv4" || key == "ipv6") {
      ids.hosts.push_back(StripBrackets(value));
      if (key == "host") {
        ids.names.push_back(ids.hosts.back());
      }
    } else if (key == "cidr") {
      ids.cidrs.push_back(value);
    } else if (key == "default-route") {
      ids.default_route = value == "true";
    }
  }
  return ids;
}

}  // namespace sluice::tunnel::server
