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
  flags.Repeated("source", &o.sources,
                 "Config source: file:PATH (a manifest file or directory), kube, or "
                 "etcd:URL[,URL...]; all sources are merged");
  flags.String("config", &o.config_file,
               "YAML file with these settings (keys are flag names; flags given on the command "
               "line win), or kube-proxy's KubeProxyConfiguration (v1alpha1) file");
  flags.String("etcd-prefix", &o.etcd_prefix,
               "Key prefix of etcd sources: Services under PREFIX/services/NAMESPACE/NAME, "
               "EndpointSlices under PREFIX/endpointslices/NAMESPACE/NAME");
  flags.String("etcd-cafile", &o.etcd_cafile,
               "PEM CA bundle to verify https etcd servers (default: the system's)");
  flags.String("etcd-certfile", &o.etcd_certfile,
               "PEM client certificate for https etcd servers (with --etcd-keyfile)");
  flags.String("etcd-keyfile", &o.etcd_keyfile, "PEM key of --etcd-certfile");
  flags.String("hostname-override", &o.hostname_override,
               "Node name used for traffic policy Local (default: the host name)");
  flags.String("zone", &o.zone, "This node's topology zone, for topology-aware hints");
  flags.String("service-proxy-name", &o.service_proxy_name,
               "Serve only services labelled service.kubernetes.io/service-proxy-name=NAME "
               "(default: only unlabelled services)");
  flags.String("kubeconfig", &o.kubeconfig,
               "--source=kube: kubeconfig file with the API server and credentials (default: "
               "the pod's service account)");
  flags.String("master", &o.master,
               "--source=kube: API server address, overriding the kubeconfig's (alone: with the "
               "pod's service account credentials when mounted)");
  flags.Bool("allow-loopback", &o.allow_loopback,
             "Accept EndpointSlice addresses (which the API server refuses there) and, from "
             "the file and etcd sources, cluster IPs on loopback (127.0.0.0/8, ::1): for local "
             "demos, tests and benchmarks");
  flags.String("healthz-bind-address", &o.healthz_bind_address,
               "IP:PORT for /healthz and /livez; empty disables");
  flags.String("metrics-bind-address", &o.metrics_bind_address,
               "IP:PORT for /metrics, /proxyMode and /debug/services; empty disables");
  flags.Duration("sync-period", &o.sync_period,
                 "Longest time between syncs; /healthz fails when an update waits 2x this");
  flags.Duration("min-sync-period", &o.min_sync_period,
                 "Shortest time between syncs; changes within it are applied together");
  flags.Int("workers", &o.workers,
            "Data-path threads, each with its own listeners (0: one per CPU)");
  flags.String("vip-interface", &o.vip_interface,
               "Interface for service VIPs (default: a dummy link sluice0 when the kernel has "
               "the type, else lo)");
  flags.Bool("keep-vips", &o.keep_vips,
             "Leave the VIPs in place at shutdown, so a restart does not interrupt services");
  flags.List("service-cluster-ip-range", &o.service_cluster_ip_range,
             "The cluster's service CIDRs (kube-apiserver's flag of that name; one per family): "
             "each is made local by one route instead of an address per ClusterIP, which is "
             "much faster with thousands of services; every address in them then answers "
             "locally (refused without a service)");
  flags.List("nodeport-addresses", &o.nodeport_addresses,
             "CIDRs of the node addresses NodePorts listen on (default: all addresses)");
  flags.Duration("dial-timeout", &o.dial_timeout,
                 "Total time to find an answering endpoint for a new TCP connection");
  flags.Duration("tcp-idle-timeout", &o.tcp_idle_timeout,
                 "Reset a proxied TCP connection after this long without traffic");
  flags.Duration(
      "drain-timeout", &o.drain_timeout,
      "Reset connections of a removed service port after this long (0: let them finish)");
  flags.Duration("udp-idle-timeout", &o.udp_idle_timeout,
                 "Close a UDP flow (client address -> endpoint) after this long without datagrams");
  flags.Int("max-connections-per-worker", &o.max_connections_per_worker,
            "Open proxied TCP connections a worker holds; beyond it new ones are reset at "
            "accept (sluice_connections_limited_total)");
  flags.Int("udp-max-flows-per-worker", &o.udp_max_flows_per_worker,
            "UDP flows a worker holds over all of its listeners; beyond it a new client's flow "
            "replaces the least recently used one (sluice_udp_flows_evicted_total)");
  flags.Int("max-source-connections-per-worker", &o.max_source_connections_per_worker,
            "Open proxied TCP connections one client IP holds on a worker; beyond it its new "
            "ones are reset at accept (sluice_connections_source_limited_total)");
  flags.Int("udp-max-source-flows-per-worker", &o.udp_max_source_flows_per_worker,
            "UDP flows one client IP holds on a worker; beyond it a new flow of that client "
            "replaces its own least recently used one (sluice_udp_flows_evicted_total)");
  flags.Int("max-listeners", &o.max_listeners,
            "Listening addresses (service port x address with endpoints) of the userspace "
            "proxy on this node; Services beyond it are not served, smallest admitted first "
            "(sluice_unserved_service_ports, /debug/services)");
  flags.Int("max-listeners-per-service", &o.max_listeners_per_service,
            "Listening addresses one Service may take (all of its ports); a Service over it is "
            "not served (sluice_unserved_service_ports, /debug/services)");
  flags.Int("reuseport-sockets", &o.reuseport_sockets,
            "Sockets of per-worker SO_REUSEPORT groups, which spread new TCP connections over "
            "the workers in turn; TCP addresses beyond it get one socket all workers watch");
  flags.Int("fd-reserve", &o.fd_reserve,
            "File descriptors the data path leaves free for the control plane (API watches, "
            "status servers, files, the tunnel agent), at most half the process's limit");
  flags.String("datapath", &o.datapath,
               "TCP data path: auto (sockmap if the kernel and capabilities allow it, else "
               "splice), splice, or sockmap (refuse to start without it)");
  flags.String("socket-lb", &o.socket_lb,
               "Socket-level balancing for clients on this node (connect()/sendmsg() go straight "
               "to a backend, no proxy in the path): auto (on if the kernel, capabilities and "
               "cgroup allow it and a self-test passes), on (refuse to start without it) or off");
  flags.String("socket-lb-cgroup", &o.socket_lb_cgroup,
               "cgroup v2 directory whose processes are balanced at the socket (default: the "
               "root of the cgroup v2 hierarchy, which must then be the host's)");
  flags.Bool("socket-lb-host-netns-only", &o.socket_lb_host_netns_only,
             "Balance at the socket only in the agent's network namespace (the host's), so "
             "service meshes that intercept pod traffic by destination still see service IPs");
  flags.String("socket-lb-algorithm", &o.socket_lb_algorithm,
               "Backend choice of socket-level balancing: round-robin (as the proxy) or random");
  flags.String("bpf-root", &o.bpf_root,
               "bpffs directory where socket-level balancing pins its programs and maps, so "
               "they keep working while the agent restarts (\"\": no pinning)");
  flags.Bool("strict-arp", &o.strict_arp,
             "Once the node has VIPs, set net.ipv4.conf.all.arp_ignore=1 and arp_announce=2 (as "
             "kube-proxy's IPVS strictARP) so that the node does not answer ARP on its links "
             "for externalIPs and LoadBalancer IPs; --cleanup restores the earlier values");
  flags.String("state-dir", &o.state_dir,
               "Directory for what must outlive a restart but not a reboot: the sysctl values "
               "--strict-arp changed, for --cleanup (keep it on the host, e.g. a hostPath)");
  flags.Bool("cleanup", &o.cleanup,
             "Remove what sluice leaves on the node (VIPs, pinned BPF programs and maps under "
             "--bpf-root) and exit");
  flags.List("tunnel-server-address", &o.tunnel_servers,
             "HOST:PORT[,...] of Konnectivity servers' agent ports: runs the tunnel agent");
  flags.String("tunnel-ca-cert", &o.tunnel_ca_cert,
               "CA that signs the tunnel servers' certificate");
  flags.String("tunnel-cert", &o.tunnel_cert, "Client certificate for the tunnel servers (mTLS)");
  flags.String("tunnel-key", &o.tunnel_key, "Key of --tunnel-cert");
  flags.String("tunnel-token-path", &o.tunnel_token_path,
               "Bearer token file sent to the tunnel servers (re-read on every connect)");
  flags.String("tunnel-agent-identifiers", &o.tunnel_identifiers,
               "URL-query encoded identifiers sent to the tunnel servers (default: "
               "host=<node name>)");
  flags.List("tunnel-allowed-destinations", &o.tunnel_allowed_destinations,
             "CIDR[:PORT[-PORT]] the tunnel agent may dial (default: any but loopback, "
             "link-local and this agent's own ports, which only entries naming them open)");
  flags.Duration("tunnel-drain-period", &o.tunnel_drain_period,
                 "On SIGTERM with the tunnel on: tell the servers we are draining and keep "
                 "serving this long before stopping (a second signal stops at once)");
  base::RegisterKlogFlags(flags, o.klog);
  RegisterKubeProxyFlags(flags, o.kube_proxy);
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
  if (o.socket_lb_algorithm != "round-robin" && o.socket_lb_algorithm != "random") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.socket_lb_algorithm,
                                                   "\" for flag --socket-lb-algorithm: want "
                                                   "round-robin or random"));
  }
  if (o.dial_timeout <= absl::ZeroDuration() || o.tcp_idle_timeout <= absl::ZeroDuration() ||
      o.udp_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--dial-timeout, --tcp-idle-timeout and --udp-idle-timeout must be positive");
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
      RegisterFlags(flags, o);
      RETURN_IF_ERROR(LoadKubeProxyConfiguration(path, root, flags, o.kube_proxy));
      std::vector<std::string> overridden;
      RETURN_IF_ERROR(flags.Parse(argc, argv, [&](const std::string& name) {
        if (!OverriddenByKubeProxyConfiguration(name)) {
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

}  // namespace sluice::app
