// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::tunnel::wire {

// Upstream proxy-server's --cipher-suites takes Go crypto/tls names (those tls.CipherSuites()
// lists, i.e. not the insecure ones); this turns them into an OpenSSL TLS 1.2 cipher list
// ("ECDHE-RSA-AES128-GCM-SHA256:..."). TLS 1.3 names are accepted and add nothing: neither Go
// nor sluice lets TLS 1.3 suites be configured. Unknown or insecure names are refused with
// upstream's message. An empty result means "the library's default list".
absl::StatusOr<std::string> OpenSslCipherList(const std::vector<std::string>& go_names);

}  // namespace sluice::tunnel::wire
