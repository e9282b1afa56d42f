// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

#include "agent/base/flags.h"

namespace sluice::server {

// sluice-tunnel-server's configuration. Flag names and defaults are upstream proxy-server's,
// so existing manifests work; sluice-only flags are marked in their help.
struct ServerOptions {
  std::string mode = "grpc";  // grpc | http-connect
  std::string uds_name;
  bool delete_existing_uds_file = false;
  int64_t server_port = 8090;
  std::string server_bind_address;
  std::string server_cert, server_key, server_ca_cert;
  int64_t agent_port = 8091;
  std::string agent_bind_address;
  std::string cluster_cert, cluster_key, cluster_ca_cert;
  std::string agent_namespace, agent_service_account, authentication_audience, kubeconfig;
  std::string proxy_strategies = "default";
  std::string server_id;
  int64_t server_count = 1;
  int64_t health_port = 8092;
  std::string health_bind_address;
  int64_t admin_port = 8095;
  std::string admin_bind_address = "127.0.0.1";
  absl::Duration keepalive_time = absl::Hours(1);
  absl::Duration frontend_keepalive_time = absl::Hours(1);
  int64_t xfr_channel_size = 10;
  bool enable_profiling = false;
  int64_t v = 0;
  // sluice extensions
  std::string agent_token_file;
  int64_t max_connection_buffer = 16 << 20;
  absl::Duration http_header_timeout = absl::Seconds(10);
  absl::Duration shutdown_grace_period = absl::Seconds(10);
};

void RegisterServerFlags(base::FlagSet& flags, ServerOptions& o);
// Cross-flag checks; fills a random server-id when none is given.
absl::Status ValidateServerOptions(ServerOptions& o);

}  // namespace sluice::server
