// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/proxy_agent_options.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

namespace sluice::tunnel::agent {

std::vector<base::Option> ProxyAgentOptionTable(ProxyAgentFlags& o) {
  using O = base::Option;
  constexpr O::Origin kSluice = O::Origin::kSluice;
  constexpr O::Origin kUpstream = O::Origin::kUpstream;
  std::vector<O> table = {
      {"proxy-server-host", &o.proxy_server_host, "Proxy server host to connect to.", kUpstream},
      {"proxy-server-port", &o.proxy_server_port, "Proxy server agent port.", kUpstream},
      {"ca-cert", &o.ca_cert, "CA that signs the proxy server's certificate.", kUpstream},
      {"agent-cert", &o.agent_cert, "Client certificate (mTLS).", kUpstream},
      {"agent-key", &o.agent_key, "Client key (mTLS).", kUpstream},
      {"agent-id", &o.agent_id, "Unique agent ID (default: random).", kUpstream},
      {"agent-identifiers", &o.agent_identifiers,
       "URL-query encoded identifiers: host=..&ipv4=..&ipv6=..&cidr=..&default-route=true.",
       kUpstream},
      {"service-account-token-path", &o.service_account_token_path,
       "Bearer token file sent to the server.", kUpstream},
      {"sync-interval", &o.sync_interval, "First retry interval when connecting.", kUpstream},
      {"sync-interval-cap", &o.sync_interval_cap, "Maximum retry interval.", kUpstream},
      {"sync-forever", &o.sync_forever,
       "Keep syncing to follow server count changes (sluice always does).", kUpstream},
      {"probe-interval", &o.probe_interval, "How often the server set is re-checked.", kUpstream},
      {"keepalive-time", &o.keepalive_time, "gRPC keepalive (at least 30s is used).", kUpstream},
      {"health-server-port", &o.health_server_port, "Port for /healthz, /readyz, /metrics.",
       kUpstream},
      {"health-server-host", &o.health_server_host, "Health bind address.", kUpstream},
      {"admin-server-port", &o.admin_server_port, "Port for /metrics.", kUpstream},
      {"admin-bind-address", &o.admin_bind_address, "Admin bind address.", kUpstream},
      {"alpn-proto", &o.alpn_proto,
       "ALPN protocols offered to the proxy server in the TLS handshake (then h2).", kUpstream},
      {"count-server-leases", &o.count_server_leases,
       "Count the proxy servers from their Leases (servers with --enable-lease-controller).",
       kUpstream},
      {"lease-namespace", &o.lease_namespace, "Namespace of the server Leases.", kUpstream},
      {"lease-label", &o.lease_label, "Label selector of the server Leases.", kUpstream},
      {"server-count-source", &o.server_count_source,
       "With --count-server-leases: 'default' takes the Lease count, 'max' the larger of it "
       "and the count servers announce.",
       kUpstream},
      {"kubeconfig", &o.kubeconfig,
       "kubeconfig for counting Leases (default: the pod's service account).", kUpstream},
      {"kube-api-content-type", &o.kube_api_content_type,
       "Accepted; Lease requests are sent as JSON.", kUpstream, "",
       "Lease requests are sent as JSON"},
      {"allowed-destinations", &o.allowed_destinations,
       "(sluice) CIDR[:PORT[-PORT]] the agent may dial; empty (default) allows all but "
       "loopback, link-local (cloud metadata) and this agent's own ports, which only "
       "entries naming them open (docs/tunnel.md).",
       kSluice},
      {"max-connection-buffer", &o.max_connection_buffer,
       "(sluice) Bytes queued toward one backend before that connection is closed.", kSluice},
      {"window-extension", &o.window_extension,
       "(sluice) Per-connection flow control with servers that offer it too (sluice's): a "
       "backend that reads nothing pauses only its own connection.",
       kSluice},
      {"stall-timeout", &o.stall_timeout,
       "(sluice) With a server without the window extension: a backend that reads "
       "nothing for this long while bytes wait for it is closed.",
       kSluice},
  };
  for (std::vector<O> more : {wire::UpstreamCommonOptions(o.common), base::KlogOptions(o.klog)}) {
    table.insert(table.end(), more.begin(), more.end());
  }
  return table;
}

void RegisterProxyAgentFlags(base::FlagSet& flags, ProxyAgentFlags& o) {
  base::RegisterOptions(flags, ProxyAgentOptionTable(o));
}

namespace {

// Go's url.QueryUnescape: %XX with two hex digits, '+' a space; false on a bad escape.
bool QueryUnescape(absl::string_view in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out->push_back(' ');
    } else if (in[i] != '%') {
      out->push_back(in[i]);
    } else if (i + 2 < in.size() && absl::ascii_isxdigit(in[i + 1]) &&
               absl::ascii_isxdigit(in[i + 2])) {
      auto hex = [](char c) {
        return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
      };
      out->push_back(static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2])));
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

absl::Status PositivePort(int64_t port, std::string_view flag) {
  if (port <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", port, "\" for flag --",
                                                   base::Absl(flag),
                                                   ": must be greater than 0 (as upstream)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAgentIdentifiers(std::string_view identifiers, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", base::Absl(identifiers),
                                                   "\" for flag --", base::Absl(flag), ": ",
                                                   base::Absl(why)));
  };
  for (absl::string_view part : absl::StrSplit(base::Absl(identifiers), '&')) {
    if (part.empty()) {
      continue;
    }
    if (part.find(';') != absl::string_view::npos) {
      return bad("a ';' separates nothing in a URL query; use '&'");
    }
    std::string key;
    if (!QueryUnescape(part.substr(0, part.find('=')), &key)) {
      return bad(absl::StrCat("invalid URL escape in \"", part, "\""));
    }
    std::string value;
    if (size_t eq = part.find('=');
        eq != absl::string_view::npos && !QueryUnescape(part.substr(eq + 1), &value)) {
      return bad(absl::StrCat("invalid URL escape in \"", part, "\""));
    }
    if (key != "host" && key != "ipv4" && key != "ipv6" && key != "cidr" &&
        key != "default-route") {
      return bad(absl::StrCat("unknown identifier type \"", key,
                              "\" (want host, ipv4, ipv6, cidr or default-route)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateProxyAgentFlags(const ProxyAgentFlags& o) {
  RETURN_IF_ERROR(PositivePort(o.proxy_server_port, "proxy-server-port"));
  RETURN_IF_ERROR(PositivePort(o.health_server_port, "health-server-port"));
  RETURN_IF_ERROR(PositivePort(o.admin_server_port, "admin-server-port"));
  RETURN_IF_ERROR(wire::ValidateUpstreamCommon(o.common));
  RETURN_IF_ERROR(ValidateAgentIdentifiers(o.agent_identifiers, "agent-identifiers"));
  if (o.server_count_source != "" && o.server_count_source != "default" &&
      o.server_count_source != "max") {
    return absl::InvalidArgumentError(
        "--server-count-source must be one of '', 'default', 'max', got " + o.server_count_source);
  }
  return absl::OkStatus();
}

void WarnIgnoredProxyAgentFlags(const base::FlagSet& flags, ProxyAgentFlags& o) {
  wire::WarnIgnoredFlags(flags, ProxyAgentOptionTable(o));
}

}  // namespace sluice::tunnel::agent
