// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::etcd {

// One etcd client URL, e.g. https://10.0.0.5:2379. Thread-safe (a value).
struct Endpoint {
  std::string url;  // as given, for messages
  bool tls = false;
  std::string host;  // a name or an IP address (IPv6 without brackets)
  int port = 0;
  // The gRPC target: "host:port", "[v6]:port".
  std::string Target() const;
};

// Accepts http://HOST:PORT and https://HOST:PORT (IPv6 in brackets), with an optional trailing
// slash; anything else (no port, a path, credentials, another scheme) is InvalidArgument.
absl::StatusOr<Endpoint> ParseEndpoint(std::string_view url);

}  // namespace sluice::etcd
