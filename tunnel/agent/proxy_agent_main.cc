// SPDX-License-Identifier: Apache-2.0
// sluice-proxy-agent: a drop-in for upstream proxy-agent (the same flags and defaults as v0.31,
// klog's included: proxy_agent_options.cc) built from the tunnel agent library. Flags -> wiring,
// nothing else.
#include <signal.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/file.h"
#include "lib/base/flags.h"
#include "lib/base/log.h"
#include "lib/base/process_metrics.h"
#include "lib/base/status.h"
#include "lib/http/status_server.h"

#include "tunnel/agent/proxy_agent_options.h"
#include "tunnel/agent/tunnel_agent.h"
#include "tunnel/wire/packet.h"

namespace sluice::tunnel::agent {
namespace {

std::string RandomId() {
  std::random_device rd;
  return absl::StrFormat("%08x-%04x-%04x-%08x", rd(), rd() & 0xffff, rd() & 0xffff, rd());
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
  c.agent_id = o.agent_id.empty() ? RandomId() : o.agent_id;
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
  return c;
}

struct StatusServers {
  std::unique_ptr<http::StatusServer> health;
  std::unique_ptr<http::StatusServer> admin;
};

// /healthz, /readyz (503 until a server stream is up) and /metrics on the health port, and
// /metrics on the admin port, as upstream proxy-agent serves them.
absl::StatusOr<StatusServers> StartStatusServers(const ProxyAgentFlags& o, TunnelAgent& agent,
                                                 base::Registry& registry) {
  auto metrics = [&registry] { return http::StatusServer::Metrics(registry); };
  StatusServers s;
  ASSIGN_OR_RETURN(s.health, http::StatusServer::Create(
                                 o.health_server_host, static_cast<int>(o.health_server_port),
                                 {{"/healthz",
                                   [] {
                                     return http::StatusServer::Reply{200, "ok"};
                                   }},
                                  {"/readyz",
                                   [&agent] {
                                     return agent.ConnectedServers() > 0
                                                ? http::StatusServer::Reply{200, "ok"}
                                                : http::StatusServer::Reply{
                                                      503, "not connected to any proxy server"};
                                   }},
                                  {"/metrics", metrics}}));
  ASSIGN_OR_RETURN(s.admin, http::StatusServer::Create(o.admin_bind_address,
                                                       static_cast<int>(o.admin_server_port),
                                                       {{"/metrics", metrics}}));
  return s;
}

int Run(int argc, char** argv) {
  wire::TuneMalloc();
  base::RaiseFileLimit();
  ProxyAgentFlags o;
  base::FlagSet flags("sluice-proxy-agent");
  RegisterProxyAgentFlags(flags, o);
  if (argc > 1 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  absl::Status st = flags.Parse(argc, argv);
  if (st.ok()) {
    st = ValidateProxyAgentFlags(o);
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
  WarnIgnoredProxyAgentFlags(flags, o);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  base::Registry registry;
  base::AddProcessMetrics(registry);
  auto agent = TunnelAgent::Create(ToConfig(o), registry);
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
