// SPDX-License-Identifier: Apache-2.0
// kube-proxy compatibility: KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) files, read
// and written through the option table's rows (agent/app/agent_option_table.cc: each kube-proxy
// flag with the field it stands for), so an existing kube-proxy DaemonSet runs sluice with its
// arguments and ConfigMap unchanged. Settings without a sluice meaning (masquerading, conntrack
// and IPVS tuning, Windows) are accepted and reported once.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/flags.h"
#include "lib/base/option_table.h"

namespace YAML {
class Node;
}

namespace sluice::app {

// kube-proxy's own flags (those sluice has under the same name, such as --kubeconfig or
// --healthz-bind-address, live in AgentOptions), with kube-proxy's defaults.
struct KubeProxyFlags {
  std::string write_config_to;
  bool init_only = false;
  std::string feature_gates;  // "Name=true,Other=false"
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  double kube_api_qps = 5;
  int64_t kube_api_burst = 10;
  std::string bind_address = "0.0.0.0";
  bool bind_address_hard_fail = false;
  bool profiling = false;
  std::string show_hidden_metrics_for_version;
  std::string proxy_mode;
  int64_t iptables_masquerade_bit = 14;
  bool masquerade_all = false;
  bool iptables_localhost_nodeports = true;
  absl::Duration iptables_sync_period = absl::Seconds(30);
  absl::Duration iptables_min_sync_period = absl::Seconds(1);
  absl::Duration ipvs_sync_period = absl::Seconds(30);
  absl::Duration ipvs_min_sync_period = absl::ZeroDuration();
  std::string ipvs_scheduler;
  std::vector<std::string> ipvs_exclude_cidrs;
  bool ipvs_strict_arp = false;
  absl::Duration ipvs_tcp_timeout = absl::ZeroDuration();
  absl::Duration ipvs_tcpfin_timeout = absl::ZeroDuration();
  absl::Duration ipvs_udp_timeout = absl::ZeroDuration();
  std::string detect_local_mode;
  std::string pod_bridge_interface;
  std::string pod_interface_name_prefix;
  std::string cluster_cidr;
  int64_t oom_score_adj = -999;  // kubelet's qos.KubeProxyOOMScoreAdj
  int64_t conntrack_max_per_core = 32768;
  int64_t conntrack_min = 131072;
  absl::Duration conntrack_tcp_timeout_established = absl::Hours(24);
  absl::Duration conntrack_tcp_timeout_close_wait = absl::Hours(1);
  bool conntrack_tcp_be_liberal = false;
  absl::Duration conntrack_udp_timeout = absl::ZeroDuration();
  absl::Duration conntrack_udp_timeout_stream = absl::ZeroDuration();
  absl::Duration config_sync_period = absl::Minutes(15);
  int64_t healthz_port = 10256;  // deprecated
  int64_t metrics_port = 10249;  // deprecated
  std::string proxy_port_range;  // deprecated, unused since the userspace proxy went
  absl::Duration udp_timeout = absl::Milliseconds(250);  // 1.26-1.28, userspace mode's
  std::string azure_container_registry_config;
  // component-base logging flags (logsapi).
  std::string logging_format = "text";
  absl::Duration log_flush_frequency = absl::Seconds(5);
  bool log_json_split_stream = false;
  std::string log_json_info_buffer_size = "0";
  bool log_text_split_stream = false;
  std::string log_text_info_buffer_size = "0";
  // Only in KubeProxyConfiguration files (no flag).
  std::optional<absl::Duration> nftables_sync_period;
  std::optional<absl::Duration> nftables_min_sync_period;
  // Filled while parsing: set fields and flags that mean nothing to sluice, and command-line
  // flags a KubeProxyConfiguration file overrides, each with why; reported once at start.
  std::vector<std::string> not_applied;
};

// A YAML document of kind KubeProxyConfiguration (any apiVersion: a wrong one is an error
// when loading, not a flat sluice file).
bool IsKubeProxyConfiguration(const YAML::Node& root);

// Sets the flags that `table`'s rows map KubeProxyConfiguration fields to (origin kConfigFile);
// fields no flag stands for are mapped into `k` or reported in k.not_applied. Zero and null
// values keep the default, as kube-proxy's defaulting does. A field that does not exist in
// KubeProxyConfiguration is an error naming `path`, line and field.
absl::Status LoadKubeProxyConfiguration(const std::string& path, const YAML::Node& root,
                                        base::FlagSet& flags, std::span<const base::Option> table,
                                        KubeProxyFlags& k);

// Writes every field `table` maps (but those marked kNoWrite) with the rows' current values, and
// k's nftables periods, as a KubeProxyConfiguration (v1alpha1) that kube-proxy and sluice both
// read back.
absl::Status WriteKubeProxyFile(std::span<const base::Option> table, const KubeProxyFlags& k,
                                const std::string& path);

// kube-proxy's IPPortVar takes an address without a port too: this adds `port` to an IP.
std::string AppendPortIfNeeded(const std::string& address, int64_t port);
// --feature-gates: "Name=bool,...".
absl::Status CheckFeatureGates(const std::string& gates);

// Logs each entry of k.not_applied once.
void ReportNotApplied(const KubeProxyFlags& k);

// Sets this process's /proc/self/oom_score_adj.
absl::Status ApplyOomScoreAdj(int64_t value);

}  // namespace sluice::app
