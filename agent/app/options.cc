// SPDX-License-Identifier: Apache-2.0
#include "agent/app/options.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "lib/etcd/endpoint.h"
#include "lib/net/address.h"
#include "yaml-cpp/yaml.h"

namespace sluice::app {

void RegisterFlags(base::FlagSet& flags, AgentOptions& o) {
  base::RegisterOptions(flags, AgentOptionTable(o));
  cli::RegisterStandardFlags(flags, o.standard, cli::Upstream::kKubeProxy);
}

std::string SourceSpec::ToString() const {
  switch (kind) {
    case Kind::kFile:
      return "file:" + path;
    case Kind::kKube:
      return "kube";
    case Kind::kEtcd:
      return "etcd:" + absl::StrJoin(urls, ",");
  }
  return "";
}

absl::StatusOr<SourceSpec> ParseSourceSpec(const std::string& text) {
  SourceSpec spec;
  if (absl::StartsWith(text, "file:") && text.size() > 5) {
    spec.path = text.substr(5);
    std::error_code ec;
    if (!std::filesystem::exists(spec.path, ec)) {
      return absl::NotFoundError(
          absl::StrCat("--source=", text, ": ", spec.path, " does not exist"));
    }
    return spec;
  }
  if (text == "kube") {
    spec.kind = SourceSpec::Kind::kKube;
    return spec;
  }
  if (absl::StartsWith(text, "etcd:")) {
    for (absl::string_view url : absl::StrSplit(text.substr(5), ',')) {
      auto endpoint = etcd::ParseEndpoint(base::Std(url));
      if (!endpoint.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--source=", text, ": ", endpoint.status().message()));
      }
      spec.kind = SourceSpec::Kind::kEtcd;
      spec.urls.push_back(std::string(url));
    }
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--source=", text, ": want file:PATH, kube or etcd:URL[,URL...]"));
}

namespace {

absl::Status CheckBindAddress(const char* flag, const std::string& value) {
  if (!value.empty() && !net::SocketAddress::Parse(value)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", value, "\" for flag --",
                                                   flag, ": want IP:PORT, e.g. 0.0.0.0:10256"));
  }
  return absl::OkStatus();
}

std::string ScalarText(const YAML::Node& node) { return node.as<std::string>(); }

}  // namespace

absl::Status LoadConfigFile(const std::string& path, const YAML::Node& root, base::FlagSet& flags) {
  if (root.IsNull()) {
    return absl::OkStatus();
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": want a mapping of flag names to values"));
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>("");
    if (key == "config" || !flags.Has(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config ", path, ": line ", kv.first.Mark().line + 1, ": unknown key \"", key, "\""));
    }
    std::vector<std::string> values;
    if (kv.second.IsSequence()) {
      for (const auto& item : kv.second) {
        if (!item.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--config ", path, ": line ", item.Mark().line + 1, ": ", key, ": want scalars"));
        }
        values.push_back(ScalarText(item));
      }
    } else if (kv.second.IsScalar()) {
      values.push_back(ScalarText(kv.second));
    } else if (!kv.second.IsNull()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--config ", path, ": line ", kv.second.Mark().line + 1, ": ", key, ": want a value"));
    }
    for (const auto& v : values) {
      if (absl::Status st = flags.Set(key, v, base::FlagSet::Origin::kConfigFile); !st.ok()) {
        return base::Annotate(st, absl::StrCat("--config ", path));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// TLS files only make sense for https URLs; a CA without https usually means a typo'd scheme.
absl::Status CheckEtcdTls(const AgentOptions& o) {
  if (o.etcd_certfile.empty() != o.etcd_keyfile.empty()) {
    return absl::InvalidArgumentError("--etcd-certfile and --etcd-keyfile go together");
  }
  if (o.etcd_cafile.empty() && o.etcd_certfile.empty()) {
    return absl::OkStatus();
  }
  for (const SourceSpec& spec : o.source_specs) {
    for (const std::string& url : spec.urls) {
      if (absl::StartsWith(url, "https://")) {
        return absl::OkStatus();
      }
    }
  }
  return absl::InvalidArgumentError(
      "--etcd-cafile, --etcd-certfile and --etcd-keyfile need an https:// etcd source URL");
}

// Parses the CIDRs of a list flag; `network_only` refuses one with host bits set.
absl::StatusOr<std::vector<net::Cidr>> ParseCidrs(const std::vector<std::string>& values,
                                                  std::string_view flag, bool network_only) {
  std::vector<net::Cidr> out;
  for (const auto& c : values) {
    auto cidr = net::Cidr::Parse(c);
    if (!cidr || (network_only && !(cidr->Network() == *cidr))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid value \"", c, "\" for flag --", base::Absl(flag),
          network_only ? ": want a network address like 10.96.0.0/12"
                       : ": want a CIDR like 10.0.0.0/8",
          cidr ? absl::StrCat(" (did you mean ", cidr->Network().ToString(), "?)") : ""));
    }
    out.push_back(*cidr);
  }
  return out;
}

}  // namespace

absl::Status Validate(AgentOptions& o) {
  if (o.sources.empty() && !o.cleanup && !o.kube_proxy.init_only &&
      o.kube_proxy.write_config_to.empty()) {
    return absl::InvalidArgumentError(
        "no --source given; e.g. --source=file:examples/services.yaml");
  }
  o.source_specs.clear();
  for (const auto& s : o.sources) {
    ASSIGN_OR_RETURN(SourceSpec spec, ParseSourceSpec(s));
    if (spec.kind == SourceSpec::Kind::kKube &&
        std::count(o.sources.begin(), o.sources.end(), s) > 1) {
      return absl::InvalidArgumentError("--source=kube given more than once");
    }
    o.source_specs.push_back(std::move(spec));
  }
  RETURN_IF_ERROR(CheckEtcdTls(o));
  if (o.state_dir.empty() || o.state_dir[0] != '/') {
    return absl::InvalidArgumentError("--state-dir must be an absolute path");
  }
  RETURN_IF_ERROR(CheckBindAddress("healthz-bind-address", o.healthz_bind_address));
  RETURN_IF_ERROR(CheckBindAddress("metrics-bind-address", o.metrics_bind_address));
  if (o.sync_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--sync-period must be positive");
  }
  if (o.min_sync_period > o.sync_period) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min-sync-period (", absl::FormatDuration(o.min_sync_period),
        ") must not exceed --sync-period (", absl::FormatDuration(o.sync_period), ")"));
  }
  if (o.max_connections_per_worker < 1 || o.udp_max_flows_per_worker < 1 ||
      o.max_source_connections_per_worker < 1 || o.udp_max_source_flows_per_worker < 1 ||
      o.max_listeners < 1 || o.max_listeners_per_service < 1 || o.fd_reserve < 0 ||
      o.reuseport_sockets < 0) {
    return absl::InvalidArgumentError(
        "--max-connections-per-worker, --udp-max-flows-per-worker, "
        "--max-source-connections-per-worker, --udp-max-source-flows-per-worker, "
        "--max-listeners and --max-listeners-per-service must be positive, --fd-reserve and "
        "--reuseport-sockets not negative");
  }
  if (o.workers < 0 || o.workers > 1024) {
    return absl::InvalidArgumentError("--workers must be between 0 and 1024");
  }
  if (o.datapath != "auto" && o.datapath != "splice" && o.datapath != "sockmap") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.datapath,
                                                   "\" for flag --datapath: want auto, splice "
                                                   "or sockmap"));
  }
  if (o.socket_lb != "auto" && o.socket_lb != "on" && o.socket_lb != "off") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.socket_lb,
                                                   "\" for flag --socket-lb: want auto, on or "
                                                   "off"));
  }
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"socket-lb-max-frontends", o.socket_lb_max_frontends},
        {"socket-lb-max-backends", o.socket_lb_max_backends},
        {"socket-lb-max-affinity", o.socket_lb_max_affinity}}) {
    if (value < 1 || value > (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be between 1 and 16777216, not ", value));
    }
  }
  if (o.socket_lb_algorithm != "round-robin" && o.socket_lb_algorithm != "random") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.socket_lb_algorithm,
                                                   "\" for flag --socket-lb-algorithm: want "
                                                   "round-robin or random"));
  }
  if (o.external_datapath != "auto" && o.external_datapath != "bpf" &&
      o.external_datapath != "proxy") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.external_datapath,
                                                   "\" for flag --external-datapath: want auto, "
                                                   "bpf or proxy"));
  }
  if (o.external_algorithm != "round-robin" && o.external_algorithm != "random") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.external_algorithm,
                                                   "\" for flag --external-algorithm: want "
                                                   "round-robin or random"));
  }
  if (o.external_max_flows < 2 || o.external_max_flows > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--external-max-flows must be between 2 and 16777216, not ", o.external_max_flows));
  }
  for (const std::string& device : o.external_devices) {
    if (device.empty() || device.size() >= 16 || device.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid value \"", device,
                                                     "\" for flag --external-devices: want "
                                                     "interface names"));
    }
  }
  if (o.kube_proxy.conntrack_tcp_timeout_established < absl::ZeroDuration() ||
      o.kube_proxy.conntrack_tcp_timeout_close_wait < absl::ZeroDuration() ||
      o.kube_proxy.conntrack_udp_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--conntrack-tcp-timeout-established, --conntrack-tcp-timeout-close-wait and "
        "--conntrack-udp-timeout must not be negative");
  }
  if (o.dial_timeout <= absl::ZeroDuration() || o.tcp_idle_timeout <= absl::ZeroDuration() ||
      o.udp_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--dial-timeout, --tcp-idle-timeout and --udp-idle-timeout must be positive");
  }
  if (o.tunnel_max_connection_buffer <= 0 || o.tunnel_stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--tunnel-max-connection-buffer and --tunnel-stall-timeout must be positive");
  }
  ASSIGN_OR_RETURN(o.nodeport_cidrs, ParseCidrs(o.nodeport_addresses, "nodeport-addresses",
                                                /*network_only=*/false));
  ASSIGN_OR_RETURN(o.service_cidrs, ParseCidrs(o.service_cluster_ip_range,
                                               "service-cluster-ip-range", /*network_only=*/true));
  for (const auto& server : o.tunnel_servers) {
    auto colon = server.rfind(':');
    int64_t port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(server.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("invalid value \"", server,
                                                     "\" for flag --tunnel-server-address: want "
                                                     "HOST:PORT"));
    }
  }
  if (o.tunnel_cert.empty() != o.tunnel_key.empty()) {
    return absl::InvalidArgumentError("--tunnel-cert and --tunnel-key go together");
  }
  // As kube-proxy: trimmed and lower-cased (Node names are DNS subdomains).
  o.node_name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(o.hostname_override));
  if (o.node_name.empty() && !o.hostname_override.empty()) {
    return absl::InvalidArgumentError("empty --hostname-override is invalid");
  }
  if (o.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) {
      return base::ErrnoStatus(errno, "gethostname");
    }
    o.node_name = absl::AsciiStrToLower(host);
  }
  return absl::OkStatus();
}

absl::Status ParseAgentOptions(int argc, char** argv, base::FlagSet& flags, AgentOptions& o) {
  RETURN_IF_ERROR(flags.Parse(argc, argv));
  if (o.standard.Asked()) {
    return absl::OkStatus();
  }
  return CompleteAgentOptions(argc, argv, flags, o);
}

absl::Status CompleteAgentOptions(int argc, char** argv, base::FlagSet& flags, AgentOptions& o) {
  const bool config_file = !o.config_file.empty();
  bool kube_proxy_file = false;
  if (config_file) {
    const std::string path = o.config_file;
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", e.what()));
    }
    kube_proxy_file = IsKubeProxyConfiguration(root);
    if (kube_proxy_file) {
      // kube-proxy: the file replaces the configuration object its flags were parsed into.
      // Start again from the defaults, load the file, then apply the flags that still count.
      o = AgentOptions{};
      flags = base::FlagSet(flags.program());
      const std::vector<base::Option> table = AgentOptionTable(o);
      base::RegisterOptions(flags, table);
      RETURN_IF_ERROR(LoadKubeProxyConfiguration(path, root, flags, table, o.kube_proxy));
      std::vector<std::string> overridden;
      RETURN_IF_ERROR(flags.Parse(argc, argv, [&](const std::string& name) {
        const base::Option* row = base::FindOption(table, name);
        if (row == nullptr || !(row->traits & base::Option::kFileWins)) {
          return false;
        }
        overridden.push_back(name);
        return true;
      }));
      for (const std::string& name : overridden) {
        o.kube_proxy.not_applied.push_back(
            absl::StrCat("--", name,
                         " is ignored: the --config KubeProxyConfiguration file sets it (as in "
                         "kube-proxy)"));
      }
    } else {
      RETURN_IF_ERROR(LoadConfigFile(path, root, flags));
    }
  }
  // main names the flag set after the binary when it is called as kube-proxy.
  if (o.sources.empty() && (kube_proxy_file || flags.program() == "kube-proxy" ||
                            !o.kubeconfig.empty() || !o.master.empty())) {
    o.sources.push_back("kube");
  }
  RETURN_IF_ERROR(ResolveKubeProxyFlags(o, flags, config_file));
  return Validate(o);
}

absl::Status ResolveKubeProxyFlags(AgentOptions& o, const base::FlagSet& flags, bool config_file) {
  KubeProxyFlags& k = o.kube_proxy;
  RETURN_IF_ERROR(CheckFeatureGates(k.feature_gates));
  if (k.oom_score_adj < -1000 || k.oom_score_adj > 1000) {
    return absl::InvalidArgumentError("--oom-score-adj must be within [-1000, 1000]");
  }
  auto bind_ip = net::IpAddress::Parse(k.bind_address);
  if (!bind_ip) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid value \"", k.bind_address, "\" for flag --bind-address: want an IP"));
  }
  // kube-proxy's sync periods are per mode; sluice's own flags win when given.
  const bool ipvs = k.proxy_mode == "ipvs";
  const bool nftables = k.proxy_mode == "nftables";
  auto pick = [&](const char* own, absl::Duration& dst, const char* mode_flag,
                  absl::Duration mode_value, const std::optional<absl::Duration>& nft) {
    if (flags.IsSet(own)) {
      return;
    }
    if (nftables && nft) {
      dst = *nft;
    } else if (!nftables && flags.IsSet(mode_flag)) {
      dst = mode_value;
    }
  };
  pick("sync-period", o.sync_period, ipvs ? "ipvs-sync-period" : "iptables-sync-period",
       ipvs ? k.ipvs_sync_period : k.iptables_sync_period, k.nftables_sync_period);
  pick("min-sync-period", o.min_sync_period,
       ipvs ? "ipvs-min-sync-period" : "iptables-min-sync-period",
       ipvs ? k.ipvs_min_sync_period : k.iptables_min_sync_period, k.nftables_min_sync_period);
  if (flags.IsSet("udp-timeout") && !flags.IsSet("udp-idle-timeout")) {
    o.udp_idle_timeout = k.udp_timeout;
  }
  // IPv6 primary IP: kube-proxy's defaults for the servers follow its family.
  if (!bind_ip->is_v4() && !flags.IsSet("healthz-bind-address")) {
    o.healthz_bind_address = "[::]:10256";
  }
  if (!bind_ip->is_v4() && !flags.IsSet("metrics-bind-address")) {
    o.metrics_bind_address = "[::1]:10249";
  }
  const bool ports_apply = !config_file && k.write_config_to.empty();
  o.healthz_bind_address =
      ports_apply && k.healthz_port == 0
          ? ""
          : AppendPortIfNeeded(o.healthz_bind_address, ports_apply ? k.healthz_port : 10256);
  o.metrics_bind_address =
      ports_apply && k.metrics_port == 0
          ? ""
          : AppendPortIfNeeded(o.metrics_bind_address, ports_apply ? k.metrics_port : 10249);
  // NodePort address keywords (kube-proxy 1.29+).
  std::vector<std::string> cidrs;
  for (const std::string& a : o.nodeport_addresses) {
    if (a == "all") {
      cidrs.insert(cidrs.end(), {"0.0.0.0/0", "::/0"});
    } else if (a == "localhost") {
      cidrs.insert(cidrs.end(), {"127.0.0.0/8", "::1/128"});
    } else if (a == "primary" && !bind_ip->IsUnspecified()) {
      cidrs.push_back(absl::StrCat(bind_ip->ToString(), bind_ip->is_v4() ? "/32" : "/128"));
    } else if (a == "primary") {
      k.not_applied.push_back(
          "--nodeport-addresses=primary: without --bind-address sluice does not know the "
          "node's primary IP (it reads no Node object); NodePorts answer on all addresses");
      cidrs.insert(cidrs.end(), {"0.0.0.0/0", "::/0"});
    } else {
      cidrs.push_back(a);
    }
  }
  o.nodeport_addresses = std::move(cidrs);
  if (flags.Changed("proxy-mode")) {
    k.not_applied.push_back(absl::StrCat(
        "--proxy-mode / mode \"", k.proxy_mode,
        "\" selects no data path: sluice runs its own (GET /proxyMode on the metrics address)"));
  }
  if (flags.IsSet("healthz-port") && !ports_apply) {
    k.not_applied.push_back("--healthz-port is ignored with --config, as kube-proxy does");
  }
  if (flags.IsSet("metrics-port") && !ports_apply) {
    k.not_applied.push_back("--metrics-port is ignored with --config, as kube-proxy does");
  }
  for (std::string& line :
       base::Unapplied(flags, AgentOptionTable(o), base::Option::Origin::kUpstream, "kube-proxy")) {
    k.not_applied.push_back(std::move(line));
  }
  return absl::OkStatus();
}

absl::Status WriteKubeProxyConfiguration(const AgentOptions& o, const std::string& path) {
  // The file holds the settings in effect: whichever mode reads it gets the same periods.
  AgentOptions effective = o;
  KubeProxyFlags& k = effective.kube_proxy;
  k.iptables_sync_period = k.ipvs_sync_period = o.sync_period;
  k.iptables_min_sync_period = k.ipvs_min_sync_period = o.min_sync_period;
  k.nftables_sync_period = o.sync_period;
  k.nftables_min_sync_period = o.min_sync_period;
  return WriteKubeProxyFile(AgentOptionTable(effective), k, path);
}

}  // namespace sluice::app
