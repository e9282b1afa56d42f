// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/base/option_table.h"
#include "lib/cli/command_line.h"
#include "lib/net/address.h"

#include "agent/app/kube_proxy_config.h"

namespace sluice::app {

// A --source value.
struct SourceSpec {
  enum class Kind { kFile, kKube, kEtcd };
  Kind kind = Kind::kFile;
  std::string path;               // kFile
  std::vector<std::string> urls;  // kEtcd
  std::string ToString() const;
};

// Every sluice-agent setting. Flag names follow kube-proxy's where one exists.
struct AgentOptions {
  std::vector<std::string> sources;
  std::string config_file;
  // etcd sources (kube-apiserver's flag names).
  std::string etcd_prefix = "/sluice/registry";
  std::string etcd_cafile;
  std::string etcd_certfile;
  std::string etcd_keyfile;
  std::string hostname_override;
  std::string zone;
  std::string service_proxy_name;
  std::string kubeconfig;  // --source=kube
  std::string master;
  // Endpoint addresses on loopback accepted from every source (the API server refuses them):
  // for local demos and tests whose backends listen on 127.0.0.x.
  bool allow_loopback = false;
  std::string healthz_bind_address = "0.0.0.0:10256";
  std::string metrics_bind_address = "127.0.0.1:10249";
  absl::Duration sync_period = absl::Seconds(30);
  absl::Duration min_sync_period = absl::Seconds(1);
  // Data path.
  int64_t workers = 0;  // 0: one per CPU
  std::string vip_interface;
  bool keep_vips = false;
  std::vector<std::string> nodeport_addresses;
  std::vector<std::string> service_cluster_ip_range;
  absl::Duration dial_timeout = absl::Seconds(5);
  absl::Duration tcp_idle_timeout = absl::Hours(1);
  absl::Duration drain_timeout = absl::ZeroDuration();
  absl::Duration udp_idle_timeout = absl::Seconds(30);
  int64_t max_connections_per_worker = 32768;
  int64_t udp_max_flows_per_worker = 16384;
  // Per client IP per worker.
  int64_t max_source_connections_per_worker = 8192;
  int64_t udp_max_source_flows_per_worker = 4096;
  // Listening addresses (service port x address with endpoints): node-wide and per Service.
  int64_t max_listeners = 32768;
  int64_t max_listeners_per_service = 4096;
  int64_t fd_reserve = 4096;  // descriptors the data path leaves to the control plane
  int64_t reuseport_sockets = 4096;
  // "auto": the sockmap fast path if the startup probe passes, else splice; "splice"; or
  // "sockmap": fail at start unless the probe passes.
  std::string datapath = "auto";
  // Socket-level balancing for local clients: "auto" (on if the self-test passes), "on" (fail
  // at start without it) or "off".
  std::string socket_lb = "auto";
  std::string socket_lb_cgroup;  // default: the cgroup v2 root
  bool socket_lb_host_netns_only = false;
  std::string socket_lb_algorithm = "round-robin";
  // Socket-LB map sizes (max_entries, fixed at load): kernel memory scales with them.
  int64_t socket_lb_max_frontends = 65536;
  int64_t socket_lb_max_backends = 262144;
  int64_t socket_lb_max_affinity = 16384;
  // eBPF NAT for remote clients (NodePorts, external and LoadBalancer IPs): "auto" (on if the
  // self-test passes), "bpf" (fail at start without it) or "proxy" (off).
  std::string external_datapath = "auto";
  std::vector<std::string> external_devices;  // default: those holding the NodePort addresses
  std::string external_algorithm = "round-robin";
  int64_t external_max_flows = 262144;  // conntrack entries (two per flow), preallocated
  std::string bpf_root = "/sys/fs/bpf/sluice";
  bool cleanup = false;
  // arp_ignore=1 and arp_announce=2 once the node has VIPs (vip/strict_arp.h), recorded under
  // state_dir for --cleanup.
  bool strict_arp = true;
  std::string state_dir = "/run/sluice";
  // Tunnel agent (Konnectivity); off unless servers are given.
  std::vector<std::string> tunnel_servers;
  std::string tunnel_ca_cert;
  std::string tunnel_cert;
  std::string tunnel_key;
  std::string tunnel_token_path;
  std::string tunnel_identifiers;  // default: host=<node name>
  std::vector<std::string> tunnel_allowed_destinations;
  absl::Duration tunnel_drain_period = absl::Seconds(10);
  int64_t tunnel_max_connection_buffer = 16 << 20;
  bool tunnel_window_extension = true;
  absl::Duration tunnel_stall_timeout = absl::Minutes(5);
  base::KlogFlags klog;  // -v and klog's other flags
  KubeProxyFlags kube_proxy;
  cli::StandardFlags standard;  // --help, -h, --version

  // Derived by Validate().
  std::vector<SourceSpec> source_specs;
  std::string node_name;
  std::vector<net::Cidr> nodeport_cidrs;
  std::vector<net::Cidr> service_cidrs;
};

// sluice-agent's option table (agent_option_table.cc), its rows pointing into `opts`.
std::vector<base::Option> AgentOptionTable(AgentOptions& opts);

// Registers every option on `flags` (defaults from `opts`).
void RegisterFlags(base::FlagSet& flags, AgentOptions& opts);

// Loads a flat --config file: a YAML mapping of flag names (any spelling: sync-period,
// sync_period, syncPeriod) to values or lists. Command-line flags win. Unknown keys are errors
// naming the key and file.
absl::Status LoadConfigFile(const std::string& path, const YAML::Node& root, base::FlagSet& flags);

// Checks values that flag types cannot (addresses, sources, periods) and fills derived fields.
absl::Status Validate(AgentOptions& opts);

// Parses argv (then --config if given) and validates: FlagSet::Parse, then CompleteAgentOptions
// unless help or the version is asked for. --config takes sluice's flat file or a
// KubeProxyConfiguration; with the latter, as in kube-proxy, the file replaces the kube-proxy flags
// bound to its fields (each one given is reported) and --source defaults to kube. So does running
// as "kube-proxy" or with --kubeconfig or --master.
absl::Status ParseAgentOptions(int argc, char** argv, base::FlagSet& flags, AgentOptions& opts);
// All of ParseAgentOptions after `flags` parsed argv (main reports a bad command line and a bad
// configuration differently, as kube-proxy does).
absl::Status CompleteAgentOptions(int argc, char** argv, base::FlagSet& flags, AgentOptions& opts);

absl::StatusOr<SourceSpec> ParseSourceSpec(const std::string& text);

// Maps kube-proxy settings onto sluice's after parsing (mode-specific sync periods,
// deprecated ports, IPv6 bind defaults, UDP timeout, NodePort address keywords) and records
// those that do not apply. `config_file`: whether --config was given (kube-proxy then ignores
// --healthz-port and --metrics-port).
absl::Status ResolveKubeProxyFlags(AgentOptions& o, const base::FlagSet& flags, bool config_file);

// Writes the effective settings as a KubeProxyConfiguration (v1alpha1) that kube-proxy and
// sluice both read back (--write-config-to): every mode's sync periods are the effective ones.
absl::Status WriteKubeProxyConfiguration(const AgentOptions& o, const std::string& path);

}  // namespace sluice::app
