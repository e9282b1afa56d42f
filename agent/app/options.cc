// SPDX-License-Identifier: Apache-2.0
#include "agent/app/options.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

#include "agent/base/status.h"
#include "agent/net/address.h"

namespace sluice::app {

void RegisterFlags(base::FlagSet& flags, AgentOptions& o) {
  flags.Repeated("source", &o.sources,
                 "Config source: file:PATH (a manifest file or directory), kube, or "
                 "etcd:URL[,URL...]; all sources are merged");
  flags.String("config", &o.config_file,
               "YAML file with these settings (keys are flag names); flags given on the command "
               "line win");
  flags.String("hostname-override", &o.hostname_override,
               "Node name used for traffic policy Local (default: the host name)");
  flags.String("zone", &o.zone, "This node's topology zone, for topology-aware hints");
  flags.String("service-proxy-name", &o.service_proxy_name,
               "Serve only services labelled service.kubernetes.io/service-proxy-name=NAME "
               "(default: only unlabelled services)");
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
  flags.String("datapath", &o.datapath,
               "TCP data path: auto (sockmap if the kernel and capabilities allow it, else "
               "splice), splice, or sockmap (refuse to start without it)");
  flags.Int("v", &o.v, "Log verbosity");
  flags.Bool("help", &o.help, "Show this help and exit");
  flags.Bool("version", &o.version, "Print the version and exit");
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
  if (text == "kube" || absl::StartsWith(text, "etcd:")) {
    return absl::UnimplementedError(absl::StrCat(
        "--source=", text, ": the kube and etcd sources are not built into this version yet"));
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

absl::Status LoadConfigFile(const std::string& path, base::FlagSet& flags) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", e.what()));
  }
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

absl::Status Validate(AgentOptions& o) {
  if (o.sources.empty()) {
    return absl::InvalidArgumentError(
        "no --source given; e.g. --source=file:examples/services.yaml");
  }
  o.source_specs.clear();
  for (const auto& s : o.sources) {
    ASSIGN_OR_RETURN(SourceSpec spec, ParseSourceSpec(s));
    o.source_specs.push_back(std::move(spec));
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
  if (o.workers < 0 || o.workers > 1024) {
    return absl::InvalidArgumentError("--workers must be between 0 and 1024");
  }
  if (o.datapath != "auto" && o.datapath != "splice" && o.datapath != "sockmap") {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.datapath,
                                                   "\" for flag --datapath: want auto, splice "
                                                   "or sockmap"));
  }
  if (o.dial_timeout <= absl::ZeroDuration() || o.tcp_idle_timeout <= absl::ZeroDuration() ||
      o.udp_idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--dial-timeout, --tcp-idle-timeout and --udp-idle-timeout must be positive");
  }
  o.nodeport_cidrs.clear();
  for (const auto& c : o.nodeport_addresses) {
    auto cidr = net::Cidr::Parse(c);
    if (!cidr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid value \"", c, "\" for flag --nodeport-addresses: want a CIDR like 10.0.0.0/8"));
    }
    o.nodeport_cidrs.push_back(*cidr);
  }
  o.node_name = o.hostname_override;
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
  if (o.help || o.version) {
    return absl::OkStatus();
  }
  if (!o.config_file.empty()) {
    RETURN_IF_ERROR(LoadConfigFile(o.config_file, flags));
  }
  return Validate(o);
}

}  // namespace sluice::app
