// SPDX-License-Identifier: Apache-2.0
#include "agent/app/kube_proxy_config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <type_traits>
#include <variant>

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

namespace sluice::app {

namespace {

constexpr const char* kApiVersion = "kubeproxy.config.k8s.io/v1alpha1";

// KubeProxyConfiguration fields that no flag stands for (those with one are the option table's
// rows, AgentOptionTable). `pointer`: a Go pointer field, where null is the default and a zero
// is a value; elsewhere a zero value means "default" too. Reported when set, with `why`.
struct Field {
  std::string_view path;
  std::string_view flag;  // empty for the fields below
  bool pointer = false;
  std::string_view why = {};
};
constexpr Field kFileOnly[] = {
    {"clientConnection.acceptContentTypes", "", false, "sluice reads the API as JSON"},
    {"iptables.snatNodeInternalIP", "", true,
     "sluice's eBPF NAT masquerades to the address of the device a flow leaves by"},
    {"nftables.masqueradeBit", "", true,
     "sluice marks no packets: its eBPF NAT masquerades without a netfilter mark"},
    {"nftables.masqueradeAll", "", false,
     "sluice masquerades only remote clients' eTP Cluster flows to a backend on another node (its "
     "eBPF NAT); local clients, balanced at the socket, need none"},
    {"nftables.syncPeriod", ""},     // mapped in Loader::Value
    {"nftables.minSyncPeriod", ""},  // mapped in Loader::Value
    {"winkernel.networkName", "", false, "Windows only"},
    {"winkernel.sourceVip", "", false, "Windows only"},
    {"winkernel.enableDSR", "", false, "Windows only"},
    {"winkernel.rootHnsEndpointName", "", false, "Windows only"},
    {"winkernel.forwardHealthCheckVip", "", false, "Windows only"},
    {"windowsRunAsService", "", false, "Windows only"},
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

// The field at `path`: an option table row's, else one of kFileOnly.
std::optional<Field> FindField(std::span<const base::Option> table, std::string_view path) {
  for (const base::Option& row : table) {
    if (row.maps_to == path) {
      return Field{path, row.name, (row.traits & base::Option::kGoPointer) != 0};
    }
  }
  for (const Field& f : kFileOnly) {
    if (f.path == path) {
      return f;
    }
  }
  return std::nullopt;
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
  Loader(const std::string& file, base::FlagSet& flags, std::span<const base::Option> table,
         KubeProxyFlags& k)
      : file_(file), flags_(flags), table_(table), k_(k) {}

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
      const std::optional<Field> field = FindField(table_, path);
      if (!field) {
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
    if (field.path == "featureGates" || field.path == "logging.vmodule") {
      RETURN_IF_ERROR(Pairs(field, node, values));
    } else if (node.IsSequence()) {
      for (const auto& item : node) {
        if (!item.IsScalar()) {
          return absl::InvalidArgumentError(absl::StrCat(
              Where(file_, item), ": ", base::Absl(field.path), ": want a list of strings"));
        }
        values.push_back(item.as<std::string>());
      }
    } else if (node.IsScalar()) {
      std::string text = node.as<std::string>();
      if (!field.pointer && IsZero(text)) {
        return absl::OkStatus();
      }
      int64_t ns;
      if (field.path == "logging.flushFrequency" && absl::SimpleAtoi(text, &ns)) {
        text = absl::StrCat(ns, "ns");  // a bare number is nanoseconds (metav1 or int)
      }
      values.push_back(std::move(text));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(file_, node), ": ", base::Absl(field.path), ": want a value"));
    }
    if (values.empty()) {
      return absl::OkStatus();
    }
    if (field.path == "nftables.syncPeriod" || field.path == "nftables.minSyncPeriod") {
      absl::Duration d;
      if (!absl::ParseDuration(values[0], &d) || d < absl::ZeroDuration()) {
        return absl::InvalidArgumentError(absl::StrCat(Where(file_, node), ": ",
                                                       base::Absl(field.path),
                                                       ": not a duration: \"", values[0], "\""));
      }
      (field.path == "nftables.syncPeriod" ? k_.nftables_sync_period
                                           : k_.nftables_min_sync_period) = d;
      return absl::OkStatus();
    }
    if (field.flag.empty()) {
      k_.not_applied.push_back(absl::StrCat("--config ", file_, ": ", base::Absl(field.path), "=",
                                            absl::StrJoin(values, ","),
                                            " has no effect: ", base::Absl(field.why)));
      return absl::OkStatus();
    }
    for (const std::string& v : values) {
      if (absl::Status st = flags_.Set(field.flag, v, base::FlagSet::Origin::kConfigFile);
          !st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(file_, node), ": ", base::Absl(field.path), ": ", st.message()));
      }
    }
    return absl::OkStatus();
  }

  // featureGates {Name: bool} -> "Name=bool"; logging.vmodule [{filePattern, verbosity}] ->
  // "pattern=N".
  absl::Status Pairs(const Field& field, const YAML::Node& node, std::vector<std::string>& out) {
    const bool gates = field.path == "featureGates";
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
      return absl::InvalidArgumentError(absl::StrCat(Where(file_, node), ": ",
                                                     base::Absl(field.path),
                                                     gates ? ": want a mapping" : ": want a list"));
    }
    if (!pairs.empty()) {
      out.push_back(absl::StrJoin(pairs, ","));
    }
    return absl::OkStatus();
  }

  const std::string& file_;
  base::FlagSet& flags_;
  std::span<const base::Option> table_;
  KubeProxyFlags& k_;
};

}  // namespace

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

bool IsKubeProxyConfiguration(const YAML::Node& root) {
  return root.IsMap() && root["kind"] && root["kind"].IsScalar() &&
         root["kind"].as<std::string>("") == "KubeProxyConfiguration";
}

absl::Status LoadKubeProxyConfiguration(const std::string& path, const YAML::Node& root,
                                        base::FlagSet& flags, std::span<const base::Option> table,
                                        KubeProxyFlags& k) {
  const YAML::Node version = root["apiVersion"];
  if (!version || version.as<std::string>("") != kApiVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--config ", path, ": KubeProxyConfiguration apiVersion \"",
        version ? version.as<std::string>("") : "", "\" is not supported; want ", kApiVersion));
  }
  return Loader(path, flags, table, k).Section(root, "");
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

// One value of the written file.
struct Entry {
  std::string path;
  std::function<void(YAML::Emitter&)> emit;
};

void EmitValue(YAML::Emitter& out, const base::Option::Value& value) {
  std::visit(
      [&out](const auto* v) {
        using T = std::decay_t<decltype(*v)>;
        if constexpr (std::is_same_v<T, absl::Duration>) {
          out << Dur(*v);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          if (v->empty()) {
            out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
          } else {
            out << YAML::BeginSeq;
            for (const auto& item : *v) {
              out << item;
            }
            out << YAML::EndSeq;
          }
        } else {
          out << *v;
        }
      },
      value);
}

// featureGates "Name=true,Other=false" as the mapping the file has.
void EmitFeatureGates(YAML::Emitter& out, const std::string& gates) {
  out << YAML::BeginMap;
  for (absl::string_view pair : absl::StrSplit(gates, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> g = absl::StrSplit(pair, '=');
    bool b = false;
    (void)absl::SimpleAtob(absl::StripAsciiWhitespace(g.second), &b);
    out << YAML::Key << std::string(absl::StripAsciiWhitespace(g.first)) << YAML::Value << b;
  }
  out << YAML::EndMap;
}

// Emits entries sorted by path, opening and closing the sections ("a.b.c") between them.
void EmitTree(YAML::Emitter& out, std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.path < b.path; });
  std::vector<std::string> open;
  out << YAML::BeginMap;
  for (const Entry& e : entries) {
    std::vector<std::string> parts = absl::StrSplit(e.path, '.');
    const std::string key = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) {
      ++common;
    }
    for (size_t i = open.size(); i > common; --i) {
      out << YAML::EndMap;
    }
    open.resize(common);
    for (size_t i = common; i < parts.size(); ++i) {
      out << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
      open.push_back(parts[i]);
    }
    out << YAML::Key << key << YAML::Value;
    e.emit(out);
  }
  for (size_t i = 0; i < open.size(); ++i) {
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

}  // namespace

absl::Status WriteKubeProxyFile(std::span<const base::Option> table, const KubeProxyFlags& k,
                                const std::string& path) {
  std::vector<Entry> entries = {
      {"apiVersion", [](YAML::Emitter& out) { out << kApiVersion; }},
      {"kind", [](YAML::Emitter& out) { out << "KubeProxyConfiguration"; }},
      {"clientConnection.acceptContentTypes", [](YAML::Emitter& out) { out << ""; }},
  };
  for (const base::Option& row : table) {
    if (row.maps_to.empty() || (row.traits & base::Option::kNoWrite)) {
      continue;
    }
    if (row.maps_to == "featureGates") {
      const std::string& gates = *std::get<std::string*>(row.value);
      if (!gates.empty()) {
        entries.push_back(
            {"featureGates", [&gates](YAML::Emitter& out) { EmitFeatureGates(out, gates); }});
      }
      continue;
    }
    entries.push_back(
        {std::string(row.maps_to), [&row](YAML::Emitter& out) { EmitValue(out, row.value); }});
  }
  for (const auto& [field, value] :
       {std::pair{"nftables.syncPeriod", &k.nftables_sync_period},
        std::pair{"nftables.minSyncPeriod", &k.nftables_min_sync_period}}) {
    if (*value) {
      const absl::Duration d = **value;
      entries.push_back({field, [d](YAML::Emitter& out) { out << Dur(d); }});
    }
  }
  YAML::Emitter out;
  EmitTree(out, entries);
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
