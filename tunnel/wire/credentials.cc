// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/credentials.h"

#include "lib/base/file.h"
#include "lib/base/status.h"

namespace sluice::tunnel::wire {
namespace {

constexpr size_t kMaxPem = 1 << 20;

absl::StatusOr<std::string> ReadOptional(const std::string& path) {
  if (path.empty()) {
    return std::string();
  }
  return base::ReadFile(path, kMaxPem);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTls(const std::string& cert,
                                                                   const std::string& key,
                                                                   const std::string& client_ca) {
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError("TLS listener: certificate and key are both required");
  }
  grpc::SslServerCredentialsOptions options(
      client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                        : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, base::ReadFile(cert, kMaxPem));
  ASSIGN_OR_RETURN(pair.private_key, base::ReadFile(key, kMaxPem));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadOptional(client_ca));
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientTls(const std::string& ca,
                                                                    const std::string& cert,
                                                                    const std::string& key) {
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs, ReadOptional(ca));
  if (!cert.empty() && !key.empty()) {
    ASSIGN_OR_RETURN(options.pem_cert_chain, base::ReadFile(cert, kMaxPem));
    ASSIGN_OR_RETURN(options.pem_private_key, base::ReadFile(key, kMaxPem));
  }
  return grpc::SslCredentials(options);
}

}  // namespace sluice::tunnel::wire
