// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/cipher_suites.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::tunnel::wire {
namespace {

// Go's secure suites (crypto/tls CipherSuites()) and their OpenSSL names; "" for TLS 1.3.
constexpr std::array<std::pair<std::string_view, std::string_view>, 17> kSuites = {{
    {"TLS_AES_128_GCM_SHA256", ""},
    {"TLS_AES_256_GCM_SHA384", ""},
    {"TLS_CHACHA20_POLY1305_SHA256", ""},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
}};

}  // namespace

absl::StatusOr<std::string> OpenSslCipherList(const std::vector<std::string>& go_names) {
  std::string out;
  for (const std::string& name : go_names) {
    const auto* it = std::find_if(kSuites.begin(), kSuites.end(),
                                  [&](const auto& s) { return s.first == name; });
    if (it == kSuites.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cipher-suites: cipher suite ", name,
                       " not supported, doesn't exist or considered as insecure"));
    }
    if (!it->second.empty()) {
      absl::StrAppend(&out, out.empty() ? "" : ":", base::Absl(it->second));
    }
  }
  return out;
}

}  // namespace sluice::tunnel::wire
