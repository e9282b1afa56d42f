// SPDX-License-Identifier: Apache-2.0
// sluice-proxy-agent: a drop-in for upstream proxy-agent (the same flags and defaults as v0.31,
// klog's included) built from the tunnel agent library. Flags -> wiring, nothing else.
#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "lib/base/file.h"
#include "lib/base/flags.h"
#include "lib/base/log.h"
#include "lib/base/process_metrics.h"
#include "lib/base/status.h"
#include "lib/http/status_server.h"
#include "lib/kube/client_config.h"

#include "tunnel/agent/lease_counter.h"
#include "tunnel/agent/tunnel_agent.h"
#include "tunnel/wire/packet.h"
#include "tunnel/wire/upstream_flags.h"

namespace sluice::tunnel::agent {
namespace {

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
  int64_t xfr_channel_size = 150;
  std::vector<std::string> alpn_proto;
  bool count_server_leases = false;
  std::string lease_namespace = "kube-system";
  std::string lease_label = "k8s-app=konnectivity-server";
  std::string server_count_source = "default";
  std::string kubeconfig;
  std::string kube_api_content_type = "application/vnd.kubernetes.protobuf";
  bool enable_profiling = false;
  bool enable_contention_profiling = false;
  bool warn_on_channel_limit = false;
  base::KlogFlags klog;
  std::vector<std::string> allowed_destinations;
  int64_t max_connection_buffer = 16 << 20;
};

void Register(base::FlagSet& f, ProxyAgentFlags& o) {
  f.String("proxy-server-host", &o.proxy_server_host, "Proxy server host to connect to.");
  f.Int("proxy-server-port", &o.proxy_server_port, "Proxy server agent port.");
  f.String("ca-cert", &o.ca_cert, "CA that signs the proxy server's certificate.");
  f.String("agent-cert", &o.agent_cert, "Client certificate (mTLS).");
  f.String("agent-key", &o.agent_key, "Client key (mTLS).");
  f.String("agent-id", &o.agent_id, "Unique agent ID (default: random).");
  f.String("agent-identifiers", &o.agent_identifiers,
           "URL-query encoded identifiers: host=..&ipv4=..&ipv6=..&cidr=..&default-route=true.");
  f.String("service-account-token-path", &o.service_account_token_path,
           "Bearer token file sent to the server.");
  f.Duration("sync-interval", &o.sync_interval, "First retry interval when connecting.");
  f.Duration("sync-interval-cap", &o.sync_interval_cap, "Maximum retry interval.");
  f.Bool("sync-forever", &o.sync_forever,
         "Keep syncing to follow server count changes (sluice always does).");
  f.Duration("probe-interval", &o.probe_interval, "How often the server set is re-checked.");
  f.Duration("keepalive-time", &o.keepalive_time, "gRPC keepalive (at least 30s is used).");
  f.Int("health-server-port", &o.health_server_port, "Port for /healthz, /readyz, /metrics.");
  f.String("health-server-host", &o.health_server_host, "Health bind address.");
  f.Int("admin-server-port", &o.admin_server_port, "Port for /metrics.");
  f.String("admin-bind-address", &o.admin_bind_address, "Admin bind address.");
  f.Int("xfr-channel-size", &o.xfr_channel_size, "Accepted; sluice bounds queues in bytes.");
  f.List("alpn-proto", &o.alpn_proto,
         "ALPN protocols offered to the proxy server in the TLS handshake (then h2).");
  f.Bool("count-server-leases", &o.count_server_leases,
         "Count the proxy servers from their Leases (servers with --enable-lease-controller).");
  f.String("lease-namespace", &o.lease_namespace, "Namespace of the server Leases.");
  f.String("lease-label", &o.lease_label, "Label selector of the server Leases.");
  f.String("server-count-source", &o.server_count_source,
           "With --count-server-leases: 'default' takes the Lease count, 'max' the larger of it "
           "and the count servers announce.");
  f.String("kubeconfig", &o.kubeconfig,
           "kubeconfig for counting Leases (default: the pod's service account).");
  f.String("kube-api-content-type", &o.kube_api_content_type,
           "Accepted; Lease requests are sent as JSON.");
  f.Bool("enable-profiling", &o.enable_profiling, "Accepted; no effect.");
  f.Bool("enable-contention-profiling", &o.enable_contention_profiling, "Accepted; no effect.");
  f.Bool("warn-on-channel-limit", &o.warn_on_channel_limit,
         "Accepted; sluice has no channels to warn about.");
  base::RegisterKlogFlags(f, o.klog);
  f.List("allowed-destinations", &o.allowed_destinations,
         "(sluice) CIDR[:PORT[-PORT]] the agent may dial; empty (default) allows all but "
         "loopback, link-local (cloud metadata) and this agent's own ports, which only "
         "entries naming them open (docs/tunnel.md).");
  f.Int("max-connection-buffer", &o.max_connection_buffer,
        "(sluice) Bytes queued toward one backend before that connection is closed.");
}

// Logs once for each upstream flag that was set but means nothing to sluice.
void WarnIgnored(const base::FlagSet& flags) {
  static constexpr base::IgnoredFlag kIgnored[] = {
      {"kube-api-content-type", "Lease requests are sent as JSON"},
  };
  wire::WarnIgnoredFlags(flags, kIgnored);
}

TunnelAgentConfig ToConfig(const ProxyAgentFlags& o) {
  TunnelAgentConfig c;
  c.servers = {absl::StrCat(o.proxy_server_host.find(':') != std::string::npos
                                ? absl::StrCat("[", o.proxy_server_host, "]")
                                : o.proxy_server_host,
                            ":", o.proxy_server_port)};
  c.ca_cert = o.ca_cert;
  c.agent_cert = o.agent_cert;
  c.agent_key = o.agent_key;
  c.token_path = o.service_account_token_path;
  c.agent_id = o.agent_id.empty() ? wire::RandomUuid() : o.agent_id;  // upstream's default
  c.identifiers = o.agent_identifiers;
  c.sync_interval = o.sync_interval;
  c.sync_interval_cap = o.sync_interval_cap;
  c.probe_interval = o.probe_interval;
  c.keepalive_time = o.keepalive_time;
  c.allowed_destinations = o.allowed_destinations;
  c.own_ports = {static_cast<uint16_t>(o.health_server_port),
                 static_cast<uint16_t>(o.admin_server_port)};
  c.max_connection_buffer = static_cast<size_t>(o.max_connection_buffer);
  c.alpn_protos = o.alpn_proto;
  return c;
}

struct StatusServers {
  std::unique_ptr<http::StatusServer> health;
  std::unique_ptr<http::StatusServer> admin;
};

// /healthz, /readyz and /ready (503 until a server stream is up, with upstream's check list)
// and /metrics on the health port; the admin port's /metrics is a 301 to the health port's, as
// upstream proxy-agent serves them.
absl::StatusOr<StatusServers> StartStatusServers(const ProxyAgentFlags& o, TunnelAgent& agent,
                                                 base::Registry& registry) {
  auto ready = [&agent] {
    return agent.ConnectedServers() > 0
               ? http::StatusServer::Reply{200, "ok"}
               : http::StatusServer::Reply{
                     503, "[+]ping ok\n[-]server-connected failed: no servers connected\n"};
  };
  StatusServers s;
  ASSIGN_OR_RETURN(
      s.health, http::StatusServer::Create(
                    o.health_server_host, static_cast<int>(o.health_server_port),
                    {{"/healthz",
                      [] {
                        return http::StatusServer::Reply{200, "ok"};
                      }},
                     {"/readyz", ready},
                     {"/ready", ready},
                     {"/metrics", [&registry] { return http::StatusServer::Metrics(registry); }}}));
  http::StatusServer::Reply moved;
  moved.redirect_port = static_cast<int>(o.health_server_port);
  ASSIGN_OR_RETURN(s.admin, http::StatusServer::Create(o.admin_bind_address,
                                                       static_cast<int>(o.admin_server_port),
                                                       {{"/metrics", [moved] { return moved; }}}));
  return s;
}

int Run(int argc, char** argv) {
  wire::TuneMalloc();
  base::RaiseFileLimit();
  ProxyAgentFlags o;
  base::FlagSet flags("sluice-proxy-agent");
  Register(flags, o);
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  absl::Status st = flags.Parse(argc, argv);
  if (st.ok() && o.server_count_source != "" && o.server_count_source != "default" &&
      o.server_count_source != "max") {
    st = absl::InvalidArgumentError(
        "--server-count-source must be one of '', 'default', 'max', got " + o.server_count_source);
  }
  absl::StatusOr<std::unique_ptr<base::LogOutput>> log =  // lives until the process ends
      std::unique_ptr<base::LogOutput>();
  if (st.ok()) {
    log = base::LogOutput::Start(o.klog, "sluice-proxy-agent");
    st = log.status();
  }
  if (!st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  WarnIgnored(flags);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  base::Registry registry;
  base::AddProcessMetrics(registry);
  TunnelAgentConfig config = ToConfig(o);
  std::unique_ptr<LeaseCounter> leases;
  if (o.count_server_leases) {
    auto kube_config = kube::ResolveClientConfig(o.kubeconfig, "");
    auto counter = kube_config.ok()
                       ? LeaseCounter::Create(*kube_config, o.lease_namespace, o.lease_label)
                       : absl::StatusOr<std::unique_ptr<LeaseCounter>>(kube_config.status());
    if (!counter.ok()) {
      LOG(ERROR) << "--count-server-leases: " << counter.status();
      return 2;
    }
    leases = std::move(*counter);
    config.lease_count = [counter = leases.get()] { return counter->Count(); };
    config.server_count_max = o.server_count_source == "max";
  }
  auto agent = TunnelAgent::Create(std::move(config), registry);
  if (!agent.ok()) {
    LOG(ERROR) << agent.status();
    return 2;
  }
  auto status = StartStatusServers(o, *agent->get(), registry);
  if (!status.ok()) {
    LOG(ERROR) << status.status();
    return 1;
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  if (sig == SIGTERM) {
    // First SIGTERM: tell servers we are going (DRAIN) and keep serving until the next one.
    LOG(INFO) << "SIGTERM: draining; send another signal to stop";
    (*agent)->Drain();
    sigwait(&sigs, &sig);
  }
  LOG(INFO) << "signal " << sig << ": stopping";
  agent->reset();
  return 0;
}

}  // namespace
}  // namespace sluice::tunnel::agent

int main(int argc, char** argv) { return sluice::tunnel::agent::Run(argc, argv); }
