// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/option_table.h"

#include "tunnel/wire/stall_watch.h"
#include "tunnel/wire/upstream_flags.h"

namespace sluice::tunnel::agent {

// sluice-proxy-agent's settings: upstream proxy-agent's flags and defaults (v0.31, klog's
// included, -v 4 as upstream sets it) and sluice's own.
struct ProxyAgentFlags {
  std::string proxy_server_host = "127.0.0.1";
  int64_t proxy_server_port = 8091;
  std::string ca_cert, agent_cert, agent_key;
  std::string agent_id;
  std::string agent_identifiers;
  std::string service_account_token_path;
  absl::Duration sync_interval = absl::Seconds(1);
  absl::Duration sync_interval_cap = absl::Seconds(10);
  bool sync_forever = false;
  absl::Duration probe_interval = absl::Seconds(1);
  absl::Duration keepalive_time = absl::Hours(1);
  int64_t health_server_port = 8093;
  std::string health_server_host;
  int64_t admin_server_port = 8094;
  std::string admin_bind_address = "127.0.0.1";
  std::vector<std::string> alpn_proto;
  bool count_server_leases = false;
  std::string lease_namespace = "kube-system";
  std::string lease_label = "k8s-app=konnectivity-server";
  std::string server_count_source = "default";
  std::string kubeconfig;
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  wire::UpstreamCommonFlags common{.xfr_channel_size = 150};
  base::KlogFlags klog{.v = 4};
  std::vector<std::string> allowed_destinations;
  int64_t max_connection_buffer = 16 << 20;
  absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout;
  bool window_extension = true;
};

// The option table (lib/base/option_table.h), its rows pointing into `o`: registration, --help,
// the report of ignored flags and docs/tunnel.md's table come from it.
std::vector<base::Option> ProxyAgentOptionTable(ProxyAgentFlags& o);
void RegisterProxyAgentFlags(base::FlagSet& flags, ProxyAgentFlags& o);

// What upstream's Validate() refuses and flag types cannot say, each error naming the flag and
// the value.
absl::Status ValidateProxyAgentFlags(const ProxyAgentFlags& o);

// --agent-identifiers as upstream reads it: a URL query (url.ParseQuery) whose keys are host,
// ipv4, ipv6, cidr or default-route.
absl::Status ValidateAgentIdentifiers(std::string_view identifiers, std::string_view flag);

// Logs once for each upstream flag that was set but means nothing to sluice.
void WarnIgnoredProxyAgentFlags(const base::FlagSet& flags, ProxyAgentFlags& o);

}  // namespace sluice::tunnel::agent
