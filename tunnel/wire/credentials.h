// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace sluice::tunnel::wire {

// TLS for a gRPC listener from PEM files. A non-empty `client_ca` requires and verifies
// client certificates (mTLS). Errors name the file that failed.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTls(const std::string& cert,
                                                                   const std::string& key,
                                                                   const std::string& client_ca);

// TLS for a gRPC channel. An empty `ca` uses the system roots; `cert`/`key` add a client
// certificate when both are set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientTls(const std::string& ca,
                                                                    const std::string& cert,
                                                                    const std::string& key);

}  // namespace sluice::tunnel::wire
