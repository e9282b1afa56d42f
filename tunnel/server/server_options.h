// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/option_table.h"

#include "tunnel/wire/upstream_flags.h"

namespace sluice::tunnel::server {

// sluice-tunnel-server's configuration. Flag names and defaults are upstream proxy-server's
// (v0.31, plus klog's), so existing manifests work; sluice-only flags are marked in their help.
struct ServerOptions {
  std::string mode = "grpc";  // grpc | http-connect
  std::string uds_name;
  bool delete_existing_uds_file = true;
  int64_t server_port = 8090;
  std::string server_bind_address;
  std::string server_cert, server_key, server_ca_cert;
  int64_t agent_port = 8091;
  std::string agent_bind_address;
  std::string cluster_cert, cluster_key, cluster_ca_cert;
  std::string agent_namespace, agent_service_account, authentication_audience, kubeconfig;
  double kubeconfig_qps = 0;  // 0: client-go's default
  int64_t kubeconfig_burst = 0;
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  std::vector<std::string> cipher_suites;  // Go names
  std::string cipher_list;                 // the same as an OpenSSL list, set by Validate
  std::string proxy_strategies = "default";
  std::string server_id;
  int64_t server_count = 1;
  int64_t health_port = 8092;
  std::string health_bind_address;
  int64_t admin_port = 8095;
  std::string admin_bind_address = "127.0.0.1";
  absl::Duration keepalive_time = absl::Hours(1);
  absl::Duration frontend_keepalive_time = absl::Hours(1);
  wire::UpstreamCommonFlags common{.xfr_channel_size = 10, .warn_on_channel_limit = true};
  bool enable_lease_controller = false;
  std::string lease_namespace = "kube-system";
  std::string lease_label = "k8s-app=konnectivity-server";
  base::KlogFlags klog{.v = 4};  // upstream's default verbosity
  // sluice extensions
  std::string agent_token_file;
  int64_t max_connection_buffer = 16 << 20;
  absl::Duration http_header_timeout = absl::Seconds(10);
  int64_t max_http_header_bytes = 16 * 1024;
  int64_t max_pending_dials_per_client = 1024;
  int64_t max_agents = 16384;
  int64_t max_tunnels_per_client = 16384;
  int64_t max_tunnels_per_agent = 16384;
  int64_t max_queued_bytes = 256 << 20;
  int64_t max_pending_token_reviews_per_client = 8;
  absl::Duration shutdown_grace_period = absl::Seconds(10);
  bool window_extension = true;
  absl::Duration stall_timeout = absl::Minutes(5);  // wire::StallWatch::kDefaultTimeout
};

// sluice-tunnel-server's option table (lib/base/option_table.h), its rows pointing into `o`:
// registration, --help, the report of ignored flags and docs/tunnel.md's table come from it.
std::vector<base::Option> ServerOptionTable(ServerOptions& o);
void RegisterServerFlags(base::FlagSet& flags, ServerOptions& o);
// Cross-flag checks (upstream's Validate() among them, each error naming the flag and value);
// fills the server-id from $PROXY_SERVER_ID (as upstream) or at random when none is given, and
// the OpenSSL form of --cipher-suites.
absl::Status ValidateServerOptions(ServerOptions& o);
// Logs once for each upstream flag that was set but means nothing to sluice.
void WarnIgnoredServerFlags(const base::FlagSet& flags, ServerOptions& o);

}  // namespace sluice::tunnel::server
