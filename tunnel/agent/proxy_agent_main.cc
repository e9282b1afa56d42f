// SPDX-License-Identifier: Apache-2.0
// sluice-proxy-agent: a drop-in for upstream proxy-agent (the same flags and defaults as v0.31,
// klog's included: proxy_agent_options.cc) built from the tunnel agent library. Flags -> wiring,
// nothing else.
#include <signal.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/base/file.h"
#include "lib/base/flags.h"
#include "lib/base/log.h"
#include "lib/base/process_metrics.h"
#include "lib/base/status.h"
#include "lib/cli/program.h"
#include "lib/cli/shutdown.h"
#include "lib/cli/status_ports.h"
#include "lib/http/status_server.h"
#include "lib/kube/client_config.h"

#include "tunnel/agent/lease_counter.h"
#include "tunnel/agent/proxy_agent_options.h"
#include "tunnel/agent/tunnel_agent.h"
#include "tunnel/wire/packet.h"

namespace sluice::tunnel::agent {
namespace {

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
  c.window_extension = o.window_extension;
  c.stall_timeout = o.stall_timeout;
  c.alpn_protos = o.alpn_proto;
  return c;
}

// /healthz, /readyz and /ready (503 until a server stream is up, with upstream's check list)
// and /metrics on the health port; the admin port's /metrics is a 301 to the health port's, as
// upstream proxy-agent serves them.
absl::StatusOr<cli::StatusPorts> StartStatusServers(const ProxyAgentFlags& o, TunnelAgent& agent,
                                                    base::Registry& registry) {
  return cli::StartStatusPorts(
      {.health_host = o.health_server_host,
       .health_port = o.health_server_port,
       .admin_host = o.admin_bind_address,
       .admin_port = o.admin_server_port,
       .readyz =
           [&agent] {
             return agent.ConnectedServers() > 0
                        ? http::StatusServer::Reply{200, "ok"}
                        : http::StatusServer::Reply{
                              503,
                              "[+]ping ok\n[-]server-connected failed: no servers connected\n"};
           },
       .metrics_on_health = true,
       .admin_redirects_to_health = true,
       .registry = &registry});
}

// Upstream's --count-server-leases: the servers' Leases counted (null without the flag).
absl::StatusOr<std::unique_ptr<LeaseCounter>> StartLeaseCounter(const ProxyAgentFlags& o,
                                                                TunnelAgentConfig& config) {
  if (!o.count_server_leases) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(kube::ClientConfig kube_config, kube::ResolveClientConfig(o.kubeconfig, ""));
  ASSIGN_OR_RETURN(std::unique_ptr<LeaseCounter> counter,
                   LeaseCounter::Create(kube_config, o.lease_namespace, o.lease_label));
  config.lease_count = [raw = counter.get()] { return raw->Count(); };
  config.server_count_max = o.server_count_source == "max";
  return counter;
}

int Serve(const base::FlagSet& flags, ProxyAgentFlags& o) {
  WarnIgnoredProxyAgentFlags(flags, o);
  base::Registry registry;
  base::AddProcessMetrics(registry);
  TunnelAgentConfig config = ToConfig(o);
  auto leases = StartLeaseCounter(o, config);  // outlives the agent, which asks it
  if (!leases.ok()) {
    LOG(ERROR) << "--count-server-leases: " << leases.status();
    return cli::kExitFailure;
  }
  auto agent = TunnelAgent::Create(std::move(config), registry);
  if (!agent.ok()) {
    LOG(ERROR) << agent.status();
    return cli::kExitFailure;
  }
  auto status = StartStatusServers(o, *agent->get(), registry);
  if (!status.ok()) {
    LOG(ERROR) << status.status();
    return cli::kExitFailure;
  }
  cli::AwaitShutdown([&](int signo) {
    if (signo != SIGTERM) {
      return absl::ZeroDuration();
    }
    // First SIGTERM: tell servers we are going (DRAIN) and keep serving until the next one.
    LOG(INFO) << "SIGTERM: draining; send another signal to stop";
    (*agent)->Drain();
    return absl::InfiniteDuration();
  });
  *status = cli::StatusPorts{};  // their /readyz reads the agent
  agent->reset();
  return cli::kExitOk;
}

int Run(int argc, char** argv) {
  wire::TuneMalloc();
  base::RaiseFileLimit();
  ProxyAgentFlags o;
  cli::StandardFlags standard;
  base::FlagSet flags("sluice-proxy-agent");
  RegisterProxyAgentFlags(flags, o);
  cli::RegisterStandardFlags(flags, standard, cli::Upstream::kKonnectivity);
  return cli::Main(argc, argv,
                   {.upstream = cli::Upstream::kKonnectivity,
                    .flags = flags,
                    .standard = standard,
                    .version =
                        [](const std::string&) {
                          return absl::StrCat("sluice-proxy-agent ", cli::kSluiceVersion);
                        },
                    .configure = [&] { return ValidateProxyAgentFlags(o); },
                    .klog = o.klog,
                    .run = [&] { return Serve(flags, o); }});
}

}  // namespace
}  // namespace sluice::tunnel::agent

int main(int argc, char** argv) { return sluice::tunnel::agent::Run(argc, argv); }
