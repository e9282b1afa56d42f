// SPDX-License-Identifier: Apache-2.0
// sluice-tunnel-server: flags -> wiring, nothing else.
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "lib/base/clock.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/metrics.h"
#include "lib/base/process_metrics.h"
#include "lib/base/status.h"
#include "lib/cli/program.h"
#include "lib/cli/shutdown.h"
#include "lib/cli/status_ports.h"
#include "lib/event/loop_thread.h"
#include "lib/http/status_server.h"
#include "lib/kube/client_config.h"

#include "tunnel/server/agent_service.h"
#include "tunnel/server/grpc_listener.h"
#include "tunnel/server/http_connect.h"
#include "tunnel/server/lease_controller.h"
#include "tunnel/server/listen.h"
#include "tunnel/server/proxy_service.h"
#include "tunnel/server/router.h"
#include "tunnel/server/server_options.h"
#include "tunnel/wire/credentials.h"
#include "tunnel/wire/packet.h"
#include "tunnel/wire/tls.h"

namespace sluice::tunnel::server {
namespace {

std::string HostPort(const std::string& host, int64_t port) {
  const std::string h = host.empty() ? "0.0.0.0" : host;
  return h.find(':') != std::string::npos ? absl::StrCat("[", h, "]:", port)
                                          : absl::StrCat(h, ":", port);
}

void CommonArgs(grpc::ServerBuilder& b, absl::Duration keepalive) {
  b.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  b.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(keepalive), INT32_MAX)));
  // Upstream agents ping no more often than every 30 s; tolerate that without GOAWAY.
  b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

// A gRPC server whose one listening socket is accepted by us (GrpcListener: gRPC 1.51's own
// accept loop dies at the first EMFILE). The listener goes first: it stops handing over
// connections before the server shuts down.
struct GrpcServing {
  std::unique_ptr<GrpcListener> listener;
  std::unique_ptr<grpc::Server> server;
};

absl::StatusOr<GrpcServing> StartGrpc(grpc::ServerBuilder& b, base::UniqueFd fd,
                                      std::shared_ptr<grpc::ServerCredentials> creds,
                                      const std::string& name, event::EventLoop& loop) {
  GrpcServing s;
  s.listener = GrpcListener::Register(b, std::move(creds), std::move(fd), name);
  s.server = b.BuildAndStart();
  if (!s.server) {
    return absl::UnavailableError("start gRPC server (" + name + "): failed");
  }
  RETURN_IF_ERROR(s.listener->Start(loop));
  return s;
}

// An empty bind address is every address of both families, as gRPC's "0.0.0.0:port" and Go's
// ":port" are: one dual-stack socket, or IPv4 alone where the node has no IPv6. SO_REUSEPORT as
// gRPC had it: servers may share an agent port.
absl::StatusOr<base::UniqueFd> ListenGrpc(const std::string& host, int64_t port) {
  if (host.empty()) {
    auto dual = ListenTcp("::", static_cast<int>(port), /*reuseport=*/true);
    if (dual.ok()) {
      return dual;
    }
  }
  return ListenTcp(host.empty() ? "0.0.0.0" : host, static_cast<int>(port), /*reuseport=*/true);
}

absl::StatusOr<GrpcServing> StartAgentServer(const ServerOptions& o, AgentService& service,
                                             event::EventLoop& loop) {
  ASSIGN_OR_RETURN(auto creds, wire::ServerTls(o.cluster_cert, o.cluster_key, o.cluster_ca_cert));
  ASSIGN_OR_RETURN(base::UniqueFd fd, ListenGrpc(o.agent_bind_address, o.agent_port));
  grpc::ServerBuilder b;
  b.RegisterService(&service);
  CommonArgs(b, o.keepalive_time);
  return StartGrpc(b, std::move(fd), std::move(creds),
                   "agent port " + HostPort(o.agent_bind_address, o.agent_port), loop);
}

absl::StatusOr<GrpcServing> StartGrpcFrontend(const ServerOptions& o, ProxyService& service,
                                              event::EventLoop& loop) {
  std::shared_ptr<grpc::ServerCredentials> creds;
  base::UniqueFd fd;
  std::string name;
  if (!o.uds_name.empty()) {
    creds = grpc::InsecureServerCredentials();
    ASSIGN_OR_RETURN(fd, ListenUnix(o.uds_name, o.delete_existing_uds_file));
    name = "frontend unix:" + o.uds_name;
  } else {
    ASSIGN_OR_RETURN(creds, wire::ServerTls(o.server_cert, o.server_key, o.server_ca_cert));
    ASSIGN_OR_RETURN(fd, ListenGrpc(o.server_bind_address, o.server_port));
    name = "frontend " + HostPort(o.server_bind_address, o.server_port);
  }
  grpc::ServerBuilder b;
  b.RegisterService(&service);
  CommonArgs(b, o.frontend_keepalive_time);
  return StartGrpc(b, std::move(fd), std::move(creds), name, loop);
}

absl::StatusOr<std::unique_ptr<HttpConnectFrontend>> StartHttpFrontend(
    const ServerOptions& o, event::EventLoop& loop, Router& router, ServerMetrics& metrics,
    wire::ByteBudget& budget, std::unique_ptr<wire::TlsContext>& tls) {
  HttpConnectOptions ho;
  base::UniqueFd fd;
  if (o.uds_name.empty()) {
    ASSIGN_OR_RETURN(tls, wire::TlsContext::CreateServer(o.server_cert, o.server_key,
                                                         o.server_ca_cert, o.cipher_list));
    ho.tls = tls.get();
    ASSIGN_OR_RETURN(fd, ListenTcp(o.server_bind_address, static_cast<int>(o.server_port)));
  } else {
    ASSIGN_OR_RETURN(fd, ListenUnix(o.uds_name, o.delete_existing_uds_file));
  }
  ho.header_timeout = o.http_header_timeout;
  ho.max_header_bytes = static_cast<size_t>(o.max_http_header_bytes);
  ho.max_queued = static_cast<size_t>(o.max_connection_buffer);
  ho.stall_timeout = o.stall_timeout;
  ho.budget = &budget;
  return HttpConnectFrontend::Create(loop, std::move(fd), router, metrics, ho);
}

// The options' cross-flag checks, the strategies and the token file: a rejected configuration.
absl::Status Configure(ServerOptions& o, std::vector<Strategy>& strategies,
                       std::optional<TokenFile>& tokens) {
  RETURN_IF_ERROR(ValidateServerOptions(o));
  ASSIGN_OR_RETURN(strategies, ParseStrategies(o.proxy_strategies));
  if (!o.agent_token_file.empty()) {
    ASSIGN_OR_RETURN(tokens, TokenFile::Load(o.agent_token_file));
  }
  return absl::OkStatus();
}

// /healthz, /readyz and /ready (upstream's deprecated alias) on the health port, /metrics on the
// admin port, with upstream's texts.
absl::StatusOr<cli::StatusPorts> StartStatusServers(const ServerOptions& o, Router& router,
                                                    base::Registry& registry) {
  return cli::StartStatusPorts({.health_host = o.health_bind_address,
                                .health_port = o.health_port,
                                .admin_host = o.admin_bind_address,
                                .admin_port = o.admin_port,
                                .readyz =
                                    [&router] {
                                      if (router.stopped_dialing()) {
                                        return http::StatusServer::Reply{500, "shutting down"};
                                      }
                                      return router.ReadyAgents() > 0
                                                 ? http::StatusServer::Reply{200, "ok"}
                                                 : http::StatusServer::Reply{
                                                       500, "no connection to any proxy agent"};
                                    },
                                .registry = &registry});
}

// The TokenReview client when agents authenticate by service-account token, else null.
absl::StatusOr<std::unique_ptr<TokenReviewer>> StartTokenReviewer(const ServerOptions& o,
                                                                  ServerMetrics& metrics) {
  if (o.agent_namespace.empty()) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(kube::ClientConfig config, kube::ResolveClientConfig(o.kubeconfig, ""));
  LOG(INFO) << "agents authenticate as service account " << o.agent_namespace << "/"
            << o.agent_service_account << " (audience " << o.authentication_audience
            << "), checked with TokenReview at " << config.server << " (" << config.origin << ")";
  // client-go's defaults when the flags are 0, as upstream's client gets them.
  return TokenReviewer::Create(
      config, {.agent_namespace = o.agent_namespace,
               .service_account = o.agent_service_account,
               .audience = o.authentication_audience,
               .max_pending_per_peer = static_cast<size_t>(o.max_pending_token_reviews_per_client),
               .qps = o.kubeconfig_qps > 0 ? o.kubeconfig_qps : 5.0,
               .burst = o.kubeconfig_burst > 0 ? static_cast<int>(o.kubeconfig_burst) : 10,
               .outcomes = &metrics.token_reviews});
}

// Upstream's --enable-lease-controller: this server's Lease, renewed, and expired ones removed.
absl::StatusOr<std::unique_ptr<LeaseController>> StartLeaseController(const ServerOptions& o,
                                                                      ServerMetrics& metrics) {
  if (!o.enable_lease_controller) {
    return nullptr;
  }
  ASSIGN_OR_RETURN(auto labels, wire::ParseLeaseLabels(o.lease_label));
  ASSIGN_OR_RETURN(kube::ClientConfig config, kube::ResolveClientConfig(o.kubeconfig, ""));
  ASSIGN_OR_RETURN(auto controller,
                   LeaseController::Create(config, {.server_id = o.server_id,
                                                    .name_space = o.lease_namespace,
                                                    .labels = std::move(labels),
                                                    .culled = &metrics.culled_leases}));
  LOG(INFO) << "holding lease " << o.lease_namespace << "/" << controller->lease_name() << " ("
            << o.lease_label << ") at " << config.server;
  controller->Start();
  return controller;
}

// Everything after configuration; returns the exit code.
int Serve(const base::FlagSet& flags, ServerOptions& o, std::vector<Strategy> strategies,
          const TokenFile* tokens) {
  WarnIgnoredServerFlags(flags, o);
  if (!o.cipher_list.empty()) {
    // gRPC reads its TLS 1.2 cipher list from here once, when the first TLS listener is made.
    setenv("GRPC_SSL_CIPHER_SUITES", o.cipher_list.c_str(), 1);
  }
  if (o.cluster_ca_cert.empty() && tokens == nullptr && o.agent_namespace.empty()) {
    LOG(WARNING) << "agents are not authenticated: set --cluster-ca-cert, --agent-namespace "
                    "(service-account tokens) or --agent-token-file";
  }
  base::Registry registry;
  base::AddProcessMetrics(registry);
  ServerMetrics metrics(registry);
  // Declared before everything that charges it, so it outlives them.
  wire::ByteBudget budget(static_cast<size_t>(o.max_queued_bytes));
  registry.AddGaugeFunc("sluice_tunnel_server_queued_bytes",
                        "Bytes queued across all tunnelled connections, both directions "
                        "(bounded by --max-queued-bytes).",
                        [&budget] { return static_cast<double>(budget.used()); });
  Router router(
      std::move(strategies), metrics,
      RouterLimits{
          .max_pending_dials_per_client = static_cast<size_t>(o.max_pending_dials_per_client),
          .max_agent_streams = static_cast<size_t>(o.max_agents),
          .max_tunnels_per_client = static_cast<size_t>(o.max_tunnels_per_client),
          .max_tunnels_per_agent = static_cast<size_t>(o.max_tunnels_per_agent),
      });
  // The process's one clock; the token reviewer's default is the same one.
  const base::Clock& clock = base::RealClock::Get();
  auto io_thread = event::LoopThread::Create("tunnel-io", clock);
  if (!io_thread.ok()) {
    LOG(ERROR) << io_thread.status();
    return 1;
  }
  event::EventLoop& loop = (*io_thread)->loop();
  auto reviewer = StartTokenReviewer(o, metrics);
  if (!reviewer.ok()) {
    LOG(ERROR) << "service-account authentication: " << reviewer.status();
    return 1;
  }
  auto leases = StartLeaseController(o, metrics);
  if (!leases.ok()) {
    LOG(ERROR) << "lease controller: " << leases.status();
    return 1;
  }
  AgentService agent_service(
      {o.server_id, static_cast<int>(o.server_count), tokens, reviewer->get(), &budget,
       o.window_extension ? wire::WindowFor(static_cast<size_t>(o.max_connection_buffer)) : 0},
      router, metrics);
  ProxyService proxy_service(router, metrics, loop, static_cast<size_t>(o.max_connection_buffer),
                             &budget, o.stall_timeout);
  auto agent_server = StartAgentServer(o, agent_service, loop);
  GrpcServing grpc_frontend;
  std::unique_ptr<wire::TlsContext> http_tls;  // outlives http_frontend
  std::unique_ptr<HttpConnectFrontend> http_frontend;
  absl::Status st = agent_server.status();
  if (st.ok() && o.mode == "grpc") {
    auto s = StartGrpcFrontend(o, proxy_service, loop);
    st = s.ok() ? absl::OkStatus() : s.status();
    if (s.ok()) {
      grpc_frontend = std::move(*s);
    }
  } else if (st.ok()) {
    auto s = StartHttpFrontend(o, loop, router, metrics, budget, http_tls);
    st = s.ok() ? absl::OkStatus() : s.status();
    http_frontend = s.ok() ? std::move(*s) : nullptr;
  }
  cli::StatusPorts status_servers;
  if (st.ok()) {
    auto started = StartStatusServers(o, router, registry);
    st = started.status();
    if (started.ok()) {
      status_servers = std::move(*started);
    }
  }
  if (!st.ok()) {
    LOG(ERROR) << st;
    return 1;
  }
  LOG(INFO) << "sluice-tunnel-server " << o.server_id << " ready: mode=" << o.mode
            << " agent-port=" << o.agent_port;
  // Graceful: not ready (load balancers stop sending), new dials refused, open tunnels get
  // the grace period to finish.
  cli::AwaitShutdown(
      [&](int signo) {
        router.StopDialing();
        LOG(INFO) << cli::SignalName(signo) << ": refusing new tunnels; waiting up to "
                  << o.shutdown_grace_period << " for " << router.Tunnels()
                  << " open ones (another signal stops at once)";
        return o.shutdown_grace_period;
      },
      [&] { return router.Tunnels() == 0; }, clock);
  LOG(INFO) << "shutting down with " << router.Tunnels() << " tunnels open";
  // Frontends first, so no frontend is left waiting on an agent that is gone.
  const auto deadline = absl::ToChronoTime(clock.Now() + absl::Milliseconds(500));
  if (grpc_frontend.server) {
    grpc_frontend.listener.reset();
    grpc_frontend.server->Shutdown(deadline);
  }
  http_frontend.reset();
  if (*reviewer) {
    (*reviewer)->Stop();  // an agent still under review is refused, not waited for
  }
  agent_server->listener.reset();
  agent_server->server->Shutdown(deadline);
  return 0;
}

int Run(int argc, char** argv) {
  wire::TuneMalloc();
  base::RaiseFileLimit();
  ServerOptions o;
  cli::StandardFlags standard;
  base::FlagSet flags("sluice-tunnel-server");
  RegisterServerFlags(flags, o);
  cli::RegisterStandardFlags(flags, standard, cli::Upstream::kKonnectivity);
  std::vector<Strategy> strategies;
  std::optional<TokenFile> tokens;
  return cli::Main(
      argc, argv,
      {.upstream = cli::Upstream::kKonnectivity,
       .flags = flags,
       .standard = standard,
       .version =
           [](const std::string&) {
             return absl::StrCat("sluice-tunnel-server ", cli::kSluiceVersion);
           },
       .configure = [&] { return Configure(o, strategies, tokens); },
       .klog = o.klog,
       .run = [&] { return Serve(flags, o, std::move(strategies), tokens ? &*tokens : nullptr); }});
}

}  // namespace
}  // namespace sluice::tunnel::server

int main(int argc, char** argv) { return sluice::tunnel::server::Run(argc, argv); }
