// SPDX-License-Identifier: Apache-2.0
#include "agent/app/kube_proxy_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"
#include "yaml-cpp/yaml.h"

#include "agent/app/options.h"

namespace sluice::app {

namespace {

constexpr const char* kApiVersion = "kubeproxy.config.k8s.io/v1alpha1";

// kube-proxy flags sluice accepts without acting on them, and why. Reported when set to
// something other than kube-proxy's default.
struct NotApplying {
  const char* flag;
  const char* why;
};
constexpr NotApplying kNotApplying[] = {
    {"feature-gates", "sluice has no feature gates; the behaviours they guard are fixed"},
    {"kube-api-content-type", "sluice reads the API as application/json"},
    {"kube-api-qps", "sluice sends one list and one watch per resource, with backoff"},
    {"kube-api-burst", "sluice sends one list and one watch per resource, with backoff"},
    {"bind-address-hard-fail", "sluice always exits when it cannot bind a port it serves"},
    {"profiling", "sluice serves no pprof endpoints"},
    {"show-hidden-metrics-for-version", "sluice hides no metrics"},
    {"iptables-masquerade-bit", "sluice proxies at the socket and never masquerades"},
    {"masquerade-all", "sluice proxies at the socket and never masquerades"},
    {"iptables-localhost-nodeports",
     "NodePorts answer on the addresses --nodeport-addresses selects"},
    {"ipvs-scheduler", "sluice balances round-robin (--socket-lb-algorithm for local clients)"},
    {"ipvs-exclude-cidrs", "sluice writes no IPVS rules"},
    {"ipvs-strict-arp", "sluice's VIPs are always local, so --strict-arp (default on) decides"},
    {"ipvs-tcp-timeout", "sluice writes no IPVS rules; see --tcp-idle-timeout"},
    {"ipvs-tcpfin-timeout", "sluice writes no IPVS rules"},
    {"ipvs-udp-timeout", "sluice writes no IPVS rules; see --udp-idle-timeout"},
    {"detect-local-mode", "sluice never masquerades, so it does not tell local traffic apart"},
    {"pod-bridge-interface", "sluice never masquerades, so it does not tell local traffic apart"},
    {"pod-interface-name-prefix",
     "sluice never masquerades, so it does not tell local traffic apart"},
    {"cluster-cidr", "sluice never masquerades, so it does not tell local traffic apart"},
    {"conntrack-max-per-core", "sluice does not NAT, so it leaves conntrack's sysctls alone"},
    {"conntrack-min", "sluice does not NAT, so it leaves conntrack's sysctls alone"},
    {"conntrack-tcp-timeout-established",
     "sluice does not NAT; its proxy's idle timeout is --tcp-idle-timeout"},
    {"conntrack-tcp-timeout-close-wait", "sluice does not NAT"},
    {"conntrack-tcp-be-liberal", "sluice does not NAT"},
    {"conntrack-udp-timeout",
     "sluice does not NAT; its UDP flows' idle timeout is --udp-idle-timeout"},
    {"conntrack-udp-timeout-stream",
     "sluice does not NAT; its UDP flows' idle timeout is --udp-idle-timeout"},
    {"config-sync-period",
     "sluice keeps its watches' state without periodic resync; see --sync-period"},
    {"proxy-port-range", "unused since kube-proxy's userspace mode"},
    {"azure-container-registry-config", "sluice pulls no images"},
    {"logging-format", "sluice logs in klog's text format"},
    {"log-flush-frequency", "sluice writes each log line at once"},
    {"log-json-split-stream", "sluice logs in klog's text format"},
    {"log-json-info-buffer-size", "sluice logs in klog's text format"},
    {"log-text-split-stream", "sluice writes every line to stderr"},
    {"log-text-info-buffer-size", "sluice writes each log line at once"},
};

// Command-line flags that a KubeProxyConfiguration file replaces (kube-proxy binds them to
// the configuration object, which the file then overwrites whole). Logging flags,
// --hostname-override, --master, --cleanup, --write-config-to and --init-only still apply.
constexpr const char* kOverridden[] = {
    "feature-gates",
    "kubeconfig",
    "kube-api-content-type",
    "kube-api-burst",
    "kube-api-qps",
    "bind-address",
    "healthz-bind-address",
    "metrics-bind-address",
    "bind-address-hard-fail",
    "profiling",
    "show-hidden-metrics-for-version",
    "proxy-mode",
    "iptables-masquerade-bit",
    "masquerade-all",
    "iptables-localhost-nodeports",
    "iptables-sync-period",
    "iptables-min-sync-period",
    "ipvs-sync-period",
    "ipvs-min-sync-period",
    "ipvs-scheduler",
    "ipvs-exclude-cidrs",
    "ipvs-strict-arp",
    "ipvs-tcp-timeout",
    "ipvs-tcpfin-timeout",
    "ipvs-udp-timeout",
    "detect-local-mode",
    "pod-bridge-interface",
    "pod-interface-name-prefix",
    "cluster-cidr",
    "nodeport-addresses",
    "oom-score-adj",
    "conntrack-max-per-core",
    "conntrack-min",
    "conntrack-tcp-timeout-established",
    "conntrack-tcp-timeout-close-wait",
    "conntrack-tcp-be-liberal",
    "conntrack-udp-timeout",
    "conntrack-udp-timeout-stream",
    "config-sync-period",
    "healthz-port",
    "metrics-port",
    "proxy-port-range",
    "udp-timeout",
};

// One KubeProxyConfiguration field: the flag it stands for, or (flag empty) a field without
// one, reported when set. `pointer`: a Go pointer field, where null is the default and a zero
// is a value; elsewhere a zero value means "default" too.
struct Field {
  const char* path;
  const char* flag;  // "" for none
  bool pointer = false;
  const char* why = "";
};
constexpr Field kFields[] = {
    {"featureGates", "feature-gates"},
    {"clientConnection.kubeconfig", "kubeconfig"},
    {"clientConnection.qps", "kube-api-qps"},
    {"clientConnection.burst", "kube-api-burst"},
    {"clientConnection.contentType", "kube-api-content-type"},
    {"clientConnection.acceptContentTypes", "", false, "sluice reads the API as JSON"},
    {"logging.format", "logging-format"},
    {"logging.flushFrequency", "log-flush-frequency"},
    {"logging.verbosity", "v"},
    {"logging.vmodule", "vmodule"},
    {"logging.options.json.splitStream", "log-json-split-stream"},
    {"logging.options.json.infoBufferSize", "log-json-info-buffer-size"},
    {"logging.options.text.splitStream", "log-text-split-stream"},
    {"logging.options.text.infoBufferSize", "log-text-info-buffer-size"},
    {"hostnameOverride", "hostname-override"},
    {"bindAddress", "bind-address"},
    {"healthzBindAddress", "healthz-bind-address"},
    {"metricsBindAddress", "metrics-bind-address"},
    {"bindAddressHardFail", "bind-address-hard-fail"},
    {"enableProfiling", "profiling"},
    {"showHiddenMetricsForVersion", "show-hidden-metrics-for-version"},
    {"mode", "proxy-mode"},
    {"iptables.masqueradeBit", "iptables-masquerade-bit", true},
    {"iptables.masqueradeAll", "masquerade-all"},
    {"iptables.localhostNodePorts", "iptables-localhost-nodeports", true},
    {"iptables.snatNodeInternalIP", "", true, "sluice never masquerades"},
    {"iptables.syncPeriod", "iptables-sync-period"},
    {"iptables.minSyncPeriod", "iptables-min-sync-period"},
    {"ipvs.syncPeriod", "ipvs-sync-period"},
    {"ipvs.minSyncPeriod", "ipvs-min-sync-period"},
    {"ipvs.scheduler", "ipvs-scheduler"},
    {"ipvs.excludeCIDRs", "ipvs-exclude-cidrs"},
    {"ipvs.strictARP", "ipvs-strict-arp"},
    {"ipvs.tcpTimeout", "ipvs-tcp-timeout"},
    {"ipvs.tcpFinTimeout", "ipvs-tcpfin-timeout"},
    {"ipvs.udpTimeout", "ipvs-udp-timeout"},
    {"nftables.masqueradeBit", "", true, "sluice never masquerades"},
    {"nftables.masqueradeAll", "", false, "sluice never masquerades"},
    {"nftables.syncPeriod", ""},     // mapped in LoadKubeProxyConfiguration
    {"nftables.minSyncPeriod", ""},  // mapped in LoadKubeProxyConfiguration
    {"winkernel.networkName", "", false, "Windows only"},
    {"winkernel.sourceVip", "", false, "Windows only"},
    {"winkernel.enableDSR", "", false, "Windows only"},
    {"winkernel.rootHnsEndpointName", "", false, "Windows only"},
    {"winkernel.forwardHealthCheckVip", "", false, "Windows only"},
    {"windowsRunAsService", "", false, "Windows only"},
    {"detectLocalMode", "detect-local-mode"},
    {"detectLocal.bridgeInterface", "pod-bridge-interface"},
    {"detectLocal.interfaceNamePrefix", "pod-interface-name-prefix"},
    {"clusterCIDR", "cluster-cidr"},
    {"nodePortAddresses", "nodeport-addresses"},
    {"oomScoreAdj", "oom-score-adj", true},
    {"conntrack.maxPerCore", "conntrack-max-per-core", true},
    {"conntrack.min", "conntrack-min", true},
    {"conntrack.tcpEstablishedTimeout", "conntrack-tcp-timeout-established", true},
    {"conntrack.tcpCloseWaitTimeout", "conntrack-tcp-timeout-close-wait", true},
    {"conntrack.tcpBeLiberal", "conntrack-tcp-be-liberal"},
    {"conntrack.udpTimeout", "conntrack-udp-timeout"},
    {"conntrack.udpStreamTimeout", "conntrack-udp-timeout-stream"},
    {"configSyncPeriod", "config-sync-period"},
    {"portRange", "proxy-port-range"},
    {"udpIdleTimeout", "udp-timeout"},  // 1.26-1.28
};
// Sections whose keys are fields of their own.
constexpr const char* kSections[] = {
    "clientConnection",
    "logging",
    "logging.options",
    "logging.options.json",
    "logging.options.text",
    "iptables",
    "ipvs",
    "nftables",
    "winkernel",
    "detectLocal",
    "conntrack",
};

const Field* FindField(std::string_view path) {
  for (const Field& f : kFields) {
    if (std::string_view(f.path) == path) {
      return &f;
    }
  }
  return nullptr;
}

// A zero value keeps kube-proxy's default (its defaulting fills zero fields in).
bool IsZero(const std::string& text) {
  absl::Duration d;
  double n;
  return text.empty() || text == "false" || (absl::SimpleAtod(text, &n) && n == 0) ||
         (absl::ParseDuration(text, &d) && d == absl::ZeroDuration());
}

std::string Where(const std::string& file, const YAML::Node& node) {
  return absl::StrCat("--config ", file, ": line ", node.Mark().line + 1);
}

class Loader {
 public:
  Loader(const std::string& file, base::FlagSet& flags, KubeProxyFlags& k)
      : file_(file), flags_(flags), k_(k) {}

  absl::Status Section(const YAML::Node& map, const std::string& prefix) {
    for (const auto& kv : map) {
      const std::string key = kv.first.as<std::string>("");
      const std::string path = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (prefix.empty() && (key == "apiVersion" || key == "kind")) {
        continue;
      }
      const bool section = std::any_of(std::begin(kSections), std::end(kSections),
                                       [&](const char* s) { return path == s; });
      if (section) {
        if (kv.second.IsMap()) {
          RETURN_IF_ERROR(Section(kv.second, path));
        } else if (!kv.second.IsNull()) {
          return absl::InvalidArgumentError(
              absl::StrCat(Where(file_, kv.second), ": ", path, ": want a mapping"));
        }
        continue;
      }
      const Field* field = FindField(path);
      if (field == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(Where(file_, kv.first), ": unknown field \"",
                                                       path, "\" in KubeProxyConfiguration"));
      }
      RETURN_IF_ERROR(Value(*field, kv.second));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Value(const Field& field, const YAML::Node& node) {
    if (node.IsNull()) {
      return absl::OkStatus();
    }
    std::vector<std::string> values;
    if (std::string_view(field.path) == "featureGates" ||
        std::string_view(field.path) == "logging.vmodule") {
      RETURN_IF_ERROR(Pairs(field, node, values));
    } else if (node.IsSequence()) {
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          return absl::InvalidArgumentError(
              absl::StrCat(Where(file_, item), ": ", field.path, ": want a list of strings"));
        }
        values.push_back(item.as<std::string>());
      }
    } else if (node.IsScalar()) {
      std::string text = node.as<std::string>();
      if (!field.pointer && IsZero(text)) {
        return absl::OkStatus();
      }
      int64_t ns;
      if (std::string_view(field.path) == "logging.flushFrequency" && absl::SimpleAtoi(text, &ns)) {
        text = absl::StrCat(ns, "ns");  // a bare number is nanoseconds (metav1 or int)
      }
      values.push_back(std::move(text));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(file_, node), ": ", field.path, ": want a value"));
    }
    if (values.empty()) {
      return absl::OkStatus();
    }
    if (std::string_view(field.path) == "nftables.syncPeriod" ||
        std::string_view(field.path) == "nftables.minSyncPeriod") {
      absl::Duration d;
      if (!absl::ParseDuration(values[0], &d) || d < absl::ZeroDuration()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(file_, node), ": ", field.path,
                                                       ": not a duration: \"", values[0], "\""));
      }
      (std::string_view(field.path) == "nftables.syncPeriod" ? k_.nftables_sync_period
                                                             : k_.nftables_min_sync_period) = d;
      return absl::OkStatus();
    }
    if (*field.flag == '\0') {
      k_.not_applied.push_back(absl::StrCat("--config ", file_, ": ", field.path, "=",
                                            absl::StrJoin(values, ","),
                                            " has no effect: ", field.why));
      return absl::OkStatus();
    }
    for (const std::string& v : values) {
      if (absl::Status st = flags_.Set(field.flag, v, base::FlagSet::Origin::kConfigFile);
          !st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(file_, node), ": ", field.path, ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }

  // featureGates {Name: bool} -> "Name=bool"; logging.vmodule [{filePattern, verbosity}] ->
  // "pattern=N".
  absl::Status Pairs(const Field& field, const YAML::Node& node, std::vector<std::string>& out) {
    const bool gates = std::string_view(field.path) == "featureGates";
    std::vector<std::string> pairs;
    if (gates && node.IsMap()) {
      for (const auto& kv : node) {
        pairs.push_back(
            absl::StrCat(kv.first.as<std::string>(""), "=", kv.second.as<std::string>("")));
      }
    } else if (!gates && node.IsSequence()) {
      for (const auto& item : node) {
        if (!item.IsMap() || !item["filePattern"] || !item["verbosity"]) {
          return absl::InvalidArgumentError(absl::StrCat(
              Where(file_, item), ": logging.vmodule: want {filePattern, verbosity} items"));
        }
        pairs.push_back(absl::StrCat(item["filePattern"].as<std::string>(""), "=",
                                     item["verbosity"].as<std::string>("")));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(Where(file_, node), ": ", field.path,
                                                     gates ? ": want a mapping" : ": want a list"));
    }
    if (!pairs.empty()) {
      out.push_back(absl::StrJoin(pairs, ","));
    }
    return absl::OkStatus();
  }

  const std::string& file_;
  base::FlagSet& flags_;
  KubeProxyFlags& k_;
};

// kube-proxy's IPPortVar takes an address without a port too; the default port is added.
std::string AppendPortIfNeeded(const std::string& address, int64_t port) {
  if (address.empty() || net::SocketAddress::Parse(address)) {
    return address;
  }
  auto ip = net::IpAddress::Parse(address);
  if (!ip) {
    return address;  // Validate names the flag and the bad value
  }
  return ip->is_v4() ? absl::StrCat(address, ":", port) : absl::StrCat("[", address, "]:", port);
}

absl::Status CheckFeatureGates(const std::string& gates) {
  for (absl::string_view pair : absl::StrSplit(gates, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(pair, '=');
    bool b;
    if (absl::StripAsciiWhitespace(kv.first).empty() ||
        !absl::SimpleAtob(absl::StripAsciiWhitespace(kv.second), &b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid value \"", gates, "\" for flag --feature-gates: want Name=true|false,..."));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterKubeProxyFlags(base::FlagSet& f, KubeProxyFlags& k) {
  f.String("write-config-to", &k.write_config_to,
           "(kube-proxy) Write the effective configuration as a KubeProxyConfiguration to this "
           "file and exit");
  f.Bool("init-only", &k.init_only,
         "(kube-proxy) Exit after the privileged initialisation (sluice has none to do)");
  f.String("feature-gates", &k.feature_gates, "(kube-proxy) Accepted; reported, no effect");
  f.String("kube-api-content-type", &k.kube_api_content_type,
           "(kube-proxy) Accepted; sluice reads the API as JSON");
  f.Double("kube-api-qps", &k.kube_api_qps, "(kube-proxy) Accepted; reported, no effect");
  f.Int("kube-api-burst", &k.kube_api_burst, "(kube-proxy) Accepted; reported, no effect");
  f.String("bind-address", &k.bind_address,
           "(kube-proxy) The node's primary IP; an IPv6 one makes the health and metrics "
           "servers default to [::]:10256 and [::1]:10249, and it is the 'primary' of "
           "--nodeport-addresses");
  f.Bool("bind-address-hard-fail", &k.bind_address_hard_fail,
         "(kube-proxy) Accepted; sluice always exits when it cannot bind");
  f.Bool("profiling", &k.profiling, "(kube-proxy) Accepted; reported, no effect");
  f.String("show-hidden-metrics-for-version", &k.show_hidden_metrics_for_version,
           "(kube-proxy) Accepted; reported, no effect");
  f.String("proxy-mode", &k.proxy_mode,
           "(kube-proxy) Accepted, any value; selects which sync-period flags apply (ipvs: "
           "--ipvs-*, else --iptables-*); /proxyMode says what sluice runs");
  f.Int("iptables-masquerade-bit", &k.iptables_masquerade_bit,
        "(kube-proxy) Accepted; reported, no effect");
  f.Bool("masquerade-all", &k.masquerade_all, "(kube-proxy) Accepted; reported, no effect");
  f.Bool("iptables-localhost-nodeports", &k.iptables_localhost_nodeports,
         "(kube-proxy) Accepted; reported, no effect");
  f.Duration("iptables-sync-period", &k.iptables_sync_period,
             "(kube-proxy) --sync-period, unless --proxy-mode=ipvs");
  f.Duration("iptables-min-sync-period", &k.iptables_min_sync_period,
             "(kube-proxy) --min-sync-period, unless --proxy-mode=ipvs");
  f.Duration("ipvs-sync-period", &k.ipvs_sync_period,
             "(kube-proxy) --sync-period with --proxy-mode=ipvs");
  f.Duration("ipvs-min-sync-period", &k.ipvs_min_sync_period,
             "(kube-proxy) --min-sync-period with --proxy-mode=ipvs");
  f.String("ipvs-scheduler", &k.ipvs_scheduler, "(kube-proxy) Accepted; reported, no effect");
  f.List("ipvs-exclude-cidrs", &k.ipvs_exclude_cidrs, "(kube-proxy) Accepted; reported, no effect");
  f.Bool("ipvs-strict-arp", &k.ipvs_strict_arp, "(kube-proxy) Accepted; reported, no effect");
  f.Duration("ipvs-tcp-timeout", &k.ipvs_tcp_timeout, "(kube-proxy) Accepted; reported, no effect");
  f.Duration("ipvs-tcpfin-timeout", &k.ipvs_tcpfin_timeout,
             "(kube-proxy) Accepted; reported, no effect");
  f.Duration("ipvs-udp-timeout", &k.ipvs_udp_timeout, "(kube-proxy) Accepted; reported, no effect");
  f.String("detect-local-mode", &k.detect_local_mode, "(kube-proxy) Accepted; reported, no effect");
  f.String("pod-bridge-interface", &k.pod_bridge_interface,
           "(kube-proxy) Accepted; reported, no effect");
  f.String("pod-interface-name-prefix", &k.pod_interface_name_prefix,
           "(kube-proxy) Accepted; reported, no effect");
  f.String("cluster-cidr", &k.cluster_cidr, "(kube-proxy) Accepted; reported, no effect");
  f.Int("oom-score-adj", &k.oom_score_adj,
        "(kube-proxy) oom_score_adj of the process, in [-1000, 1000]");
  f.Int("conntrack-max-per-core", &k.conntrack_max_per_core,
        "(kube-proxy) Accepted; reported, no effect");
  f.Int("conntrack-min", &k.conntrack_min, "(kube-proxy) Accepted; reported, no effect");
  f.Duration("conntrack-tcp-timeout-established", &k.conntrack_tcp_timeout_established,
             "(kube-proxy) Accepted; reported, no effect");
  f.Duration("conntrack-tcp-timeout-close-wait", &k.conntrack_tcp_timeout_close_wait,
             "(kube-proxy) Accepted; reported, no effect");
  f.Bool("conntrack-tcp-be-liberal", &k.conntrack_tcp_be_liberal,
         "(kube-proxy) Accepted; reported, no effect");
  f.Duration("conntrack-udp-timeout", &k.conntrack_udp_timeout,
             "(kube-proxy) Accepted; reported, no effect");
  f.Duration("conntrack-udp-timeout-stream", &k.conntrack_udp_timeout_stream,
             "(kube-proxy) Accepted; reported, no effect");
  f.Duration("config-sync-period", &k.config_sync_period,
             "(kube-proxy) Accepted; reported, no effect");
  f.Int("healthz-port", &k.healthz_port,
        "(kube-proxy, deprecated) 0 disables the health server; otherwise the port of a "
        "--healthz-bind-address given without one (ignored with --config)");
  f.Int("metrics-port", &k.metrics_port,
        "(kube-proxy, deprecated) 0 disables the metrics server; otherwise the port of a "
        "--metrics-bind-address given without one (ignored with --config)");
  f.String("proxy-port-range", &k.proxy_port_range,
           "(kube-proxy, deprecated) Accepted; reported, no effect");
  f.Duration("udp-timeout", &k.udp_timeout,
             "(kube-proxy <= 1.28) --udp-idle-timeout, unless that is given");
  f.String("azure-container-registry-config", &k.azure_container_registry_config,
           "(kube-proxy <= 1.29) Accepted; reported, no effect");
  f.String("logging-format", &k.logging_format, "(kube-proxy) Accepted; sluice logs text");
  f.Duration("log-flush-frequency", &k.log_flush_frequency,
             "(kube-proxy) Accepted; sluice writes each line at once");
  f.Bool("log-json-split-stream", &k.log_json_split_stream,
         "(kube-proxy) Accepted; reported, no effect");
  f.String("log-json-info-buffer-size", &k.log_json_info_buffer_size,
           "(kube-proxy) Accepted; reported, no effect");
  f.Bool("log-text-split-stream", &k.log_text_split_stream,
         "(kube-proxy) Accepted; reported, no effect");
  f.String("log-text-info-buffer-size", &k.log_text_info_buffer_size,
           "(kube-proxy) Accepted; reported, no effect");
}

bool IsKubeProxyConfiguration(const YAML::Node& root) {
  return root.IsMap() && root["kind"] && root["kind"].IsScalar() &&
         root["kind"].as<std::string>("") == "KubeProxyConfiguration";
}

bool OverriddenByKubeProxyConfiguration(const std::string& flag) {
  return std::any_of(std::begin(kOverridden), std::end(kOverridden),
                     [&](const char* f) { return flag == f; });
}

absl::Status LoadKubeProxyConfiguration(const std::string& path, const YAML::Node& root,
                                        base::FlagSet& flags, KubeProxyFlags& k) {
  const YAML::Node version = root["apiVersion"];
  if (!version || version.as<std::string>("") != kApiVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--config ", path, ": KubeProxyConfiguration apiVersion \"",
        version ? version.as<std::string>("") : "", "\" is not supported; want ", kApiVersion));
  }
  return Loader(path, flags, k).Section(root, "");
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
  for (const NotApplying& n : kNotApplying) {
    if (flags.Changed(n.flag)) {
      auto field = std::find_if(std::begin(kFields), std::end(kFields),
                                [&](const Field& f) { return std::string_view(f.flag) == n.flag; });
      k.not_applied.push_back(absl::StrCat(
          "--", n.flag, field != std::end(kFields) ? absl::StrCat(" (", field->path, ")") : "",
          " is accepted for compatibility with kube-proxy and has no effect: ", n.why));
    }
  }
  return absl::OkStatus();
}

void ReportNotApplied(const KubeProxyFlags& k) {
  for (const std::string& line : k.not_applied) {
    LOG(WARNING) << line;
  }
}

namespace {

// Go's time.Duration text ("0s", "1h0m0s" is also "1h"), which both parsers read back.
std::string Dur(absl::Duration d) {
  return d == absl::ZeroDuration() ? "0s" : absl::FormatDuration(d);
}

}  // namespace

absl::Status WriteKubeProxyConfiguration(const AgentOptions& o, const std::string& path) {
  const KubeProxyFlags& k = o.kube_proxy;
  YAML::Emitter out;
  auto kv = [&out](const char* key, const auto& value) {
    out << YAML::Key << key << YAML::Value << value;
  };
  auto list = [&out](const char* key, const std::vector<std::string>& values) {
    out << YAML::Key << key << YAML::Value;
    if (values.empty()) {
      out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
    } else {
      out << YAML::BeginSeq;
      for (const auto& v : values) {
        out << v;
      }
      out << YAML::EndSeq;
    }
  };
  auto periods = [&](const char* section, absl::Duration sync, absl::Duration min) {
    out << YAML::Key << section << YAML::Value << YAML::BeginMap;
    kv("minSyncPeriod", Dur(min));
    kv("syncPeriod", Dur(sync));
  };
  out << YAML::BeginMap;
  kv("apiVersion", kApiVersion);
  kv("bindAddress", k.bind_address);
  kv("bindAddressHardFail", k.bind_address_hard_fail);
  out << YAML::Key << "clientConnection" << YAML::Value << YAML::BeginMap;
  kv("acceptContentTypes", "");
  kv("burst", k.kube_api_burst);
  kv("contentType", k.kube_api_content_type);
  kv("kubeconfig", o.kubeconfig);
  kv("qps", k.kube_api_qps);
  out << YAML::EndMap;
  kv("clusterCIDR", k.cluster_cidr);
  kv("configSyncPeriod", Dur(k.config_sync_period));
  out << YAML::Key << "conntrack" << YAML::Value << YAML::BeginMap;
  kv("maxPerCore", k.conntrack_max_per_core);
  kv("min", k.conntrack_min);
  kv("tcpBeLiberal", k.conntrack_tcp_be_liberal);
  kv("tcpCloseWaitTimeout", Dur(k.conntrack_tcp_timeout_close_wait));
  kv("tcpEstablishedTimeout", Dur(k.conntrack_tcp_timeout_established));
  kv("udpStreamTimeout", Dur(k.conntrack_udp_timeout_stream));
  kv("udpTimeout", Dur(k.conntrack_udp_timeout));
  out << YAML::EndMap;
  out << YAML::Key << "detectLocal" << YAML::Value << YAML::BeginMap;
  kv("bridgeInterface", k.pod_bridge_interface);
  kv("interfaceNamePrefix", k.pod_interface_name_prefix);
  out << YAML::EndMap;
  kv("detectLocalMode", k.detect_local_mode);
  kv("enableProfiling", k.profiling);
  if (!k.feature_gates.empty()) {
    out << YAML::Key << "featureGates" << YAML::Value << YAML::BeginMap;
    for (absl::string_view pair : absl::StrSplit(k.feature_gates, ',', absl::SkipWhitespace())) {
      std::pair<std::string, std::string> g = absl::StrSplit(pair, '=');
      bool b = false;
      (void)absl::SimpleAtob(absl::StripAsciiWhitespace(g.second), &b);
      kv(std::string(absl::StripAsciiWhitespace(g.first)).c_str(), b);
    }
    out << YAML::EndMap;
  }
  kv("healthzBindAddress", o.healthz_bind_address);
  kv("hostnameOverride", o.hostname_override);
  periods("iptables", o.sync_period, o.min_sync_period);
  kv("localhostNodePorts", k.iptables_localhost_nodeports);
  kv("masqueradeAll", k.masquerade_all);
  kv("masqueradeBit", k.iptables_masquerade_bit);
  out << YAML::EndMap;
  periods("ipvs", o.sync_period, o.min_sync_period);
  list("excludeCIDRs", k.ipvs_exclude_cidrs);
  kv("scheduler", k.ipvs_scheduler);
  kv("strictARP", k.ipvs_strict_arp);
  kv("tcpFinTimeout", Dur(k.ipvs_tcpfin_timeout));
  kv("tcpTimeout", Dur(k.ipvs_tcp_timeout));
  kv("udpTimeout", Dur(k.ipvs_udp_timeout));
  out << YAML::EndMap;
  kv("kind", "KubeProxyConfiguration");
  out << YAML::Key << "logging" << YAML::Value << YAML::BeginMap;
  kv("flushFrequency", Dur(k.log_flush_frequency));
  kv("format", k.logging_format);
  kv("verbosity", o.klog.v);
  out << YAML::EndMap;
  kv("metricsBindAddress", o.metrics_bind_address);
  kv("mode", k.proxy_mode);
  periods("nftables", o.sync_period, o.min_sync_period);
  out << YAML::EndMap;
  list("nodePortAddresses", o.nodeport_addresses);
  kv("oomScoreAdj", k.oom_score_adj);
  kv("portRange", k.proxy_port_range);
  kv("showHiddenMetricsForVersion", k.show_hidden_metrics_for_version);
  out << YAML::EndMap;
  if (!out.good()) {
    return absl::InternalError(absl::StrCat("--write-config-to: ", out.GetLastError()));
  }
  std::ofstream file(path, std::ios::trunc);
  file << out.c_str() << "\n";
  file.close();
  if (!file) {
    return absl::InvalidArgumentError(absl::StrCat("--write-config-to ", path, ": cannot write"));
  }
  return absl::OkStatus();
}

absl::Status ApplyOomScoreAdj(int64_t value) {
  base::UniqueFd fd(::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC));
  const std::string text = absl::StrCat(value, "\n");
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return base::ErrnoStatus(errno, absl::StrCat("write /proc/self/oom_score_adj ", value));
  }
  return absl::OkStatus();
}

}  // namespace sluice::app
