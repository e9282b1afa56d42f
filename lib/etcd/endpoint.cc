// SPDX-License-Identifier: Apache-2.0
#include "lib/etcd/endpoint.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::etcd {

using base::Absl;

std::string Endpoint::Target() const {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

absl::StatusOr<Endpoint> ParseEndpoint(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("etcd URL \"", Absl(url), "\": ", Absl(why),
                                                   "; want http://HOST:PORT or https://HOST:PORT"));
  };
  Endpoint ep;
  ep.url = std::string(url);
  std::string_view rest = url;
  if (absl::StartsWith(Absl(rest), "https://")) {
    ep.tls = true;
    rest.remove_prefix(8);
  } else if (absl::StartsWith(Absl(rest), "http://")) {
    rest.remove_prefix(7);
  } else {
    return bad("unknown scheme");
  }
  if (!rest.empty() && rest.back() == '/') {
    rest.remove_suffix(1);
  }
  if (rest.find_first_of("/?#@") != std::string_view::npos) {
    return bad("only a host and port are allowed");
  }
  std::string_view port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad("an IPv6 address needs brackets and a port, e.g. [::1]:2379");
    }
    ep.host = std::string(rest.substr(1, close - 1));
    port = rest.substr(close + 2);
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) {
      return bad("missing port");
    }
    ep.host = std::string(rest.substr(0, colon));
    port = rest.substr(colon + 1);
    if (ep.host.find(':') != std::string::npos) {
      return bad("an IPv6 address needs brackets, e.g. [::1]:2379");
    }
  }
  if (ep.host.empty()) {
    return bad("missing host");
  }
  if (!absl::SimpleAtoi(Absl(port), &ep.port) || ep.port < 1 || ep.port > 65535) {
    return bad("port must be between 1 and 65535");
  }
  return ep;
}

}  // namespace sluice::etcd
