// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/server_options.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "tunnel/wire/cipher_suites.h"
#include "tunnel/wire/packet.h"

namespace sluice::tunnel::server {

std::vector<base::Option> ServerOptionTable(ServerOptions& o) {
  using O = base::Option;
  constexpr O::Origin kSluice = O::Origin::kSluice;
  constexpr O::Origin kUpstream = O::Origin::kUpstream;
  std::vector<O> table = {
      {"mode", &o.mode, "Frontend protocol: grpc or http-connect.", kUpstream},
      {"uds-name", &o.uds_name,
       "Serve the frontend on this Unix socket (mode 0770) "
       "instead of TCP.",
       kUpstream},
      {"delete-existing-uds-file", &o.delete_existing_uds_file,
       "Remove whatever file is at --uds-name (a stale socket is always replaced).", kUpstream},
      {"server-port", &o.server_port, "Frontend TCP port (mTLS).", kUpstream},
      {"server-bind-address", &o.server_bind_address, "Frontend bind address.", kUpstream},
      {"server-cert", &o.server_cert, "Frontend TLS certificate.", kUpstream},
      {"server-key", &o.server_key, "Frontend TLS key.", kUpstream},
      {"server-ca-cert", &o.server_ca_cert, "CA that signs frontend client certificates.",
       kUpstream},
      {"agent-port", &o.agent_port, "Agent port (always TLS).", kUpstream},
      {"agent-bind-address", &o.agent_bind_address, "Agent bind address.", kUpstream},
      {"cluster-cert", &o.cluster_cert, "Agent-port TLS certificate.", kUpstream},
      {"cluster-key", &o.cluster_key, "Agent-port TLS key.", kUpstream},
      {"cluster-ca-cert", &o.cluster_ca_cert,
       "CA for agent client certificates; set means agents need a valid certificate.", kUpstream},
      {"agent-namespace", &o.agent_namespace,
       "Authenticate agents by service-account token (TokenReview): their namespace.", kUpstream},
      {"agent-service-account", &o.agent_service_account,
       "Authenticate agents by service-account token: their service account.", kUpstream},
      {"authentication-audience", &o.authentication_audience,
       "Authenticate agents by service-account token: the audience tokens must have.", kUpstream},
      {"kubeconfig", &o.kubeconfig,
       "kubeconfig for TokenReview (default: the pod's service account).", kUpstream},
      {"kubeconfig-qps", &o.kubeconfig_qps,
       "TokenReview requests per second to the API server (0: client-go's default, 5).", kUpstream},
      {"kubeconfig-burst", &o.kubeconfig_burst,
       "TokenReview requests allowed in a burst (0: client-go's default, 10).", kUpstream},
      {"kube-api-content-type", &o.kube_api_content_type,
       "Accepted; TokenReview requests are sent as application/json, which the API server "
       "always accepts.",
       kUpstream},
      {"cipher-suites", &o.cipher_suites,
       "TLS 1.2 cipher suites (Go names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) of every "
       "TLS listener; no effect on TLS 1.3; empty means the default list.",
       kUpstream},
      {"proxy-strategies", &o.proxy_strategies,
       "Agent selection, in order: default, destHost, defaultRoute.", kUpstream},
      {"server-id", &o.server_id,
       "Unique ID of this server (default: $PROXY_SERVER_ID, else random).", kUpstream},
      {"server-count", &o.server_count, "Number of proxy servers agents should connect to.",
       kUpstream},
      {"health-port", &o.health_port, "Port for /healthz and /readyz.", kUpstream},
      {"health-bind-address", &o.health_bind_address, "Health bind address.", kUpstream},
      {"admin-port", &o.admin_port, "Port for /metrics.", kUpstream},
      {"admin-bind-address", &o.admin_bind_address, "Admin bind address.", kUpstream},
      {"keepalive-time", &o.keepalive_time, "Agent-connection keepalive.", kUpstream},
      {"frontend-keepalive-time", &o.frontend_keepalive_time, "Frontend-connection keepalive.",
       kUpstream},
      {"enable-lease-controller", &o.enable_lease_controller,
       "Hold a coordination.k8s.io Lease for this server and delete expired ones, so agents "
       "with --count-server-leases can count the servers.",
       kUpstream},
      {"lease-namespace", &o.lease_namespace, "Namespace of the server Leases.", kUpstream},
      {"lease-label", &o.lease_label, "Labels (k=v,...) of the server Leases.", kUpstream},
      {"agent-token-file", &o.agent_token_file,
       "(sluice) Static agent bearer tokens, one per line, optionally 'token,agent-id'.", kSluice},
      {"max-connection-buffer", &o.max_connection_buffer,
       "(sluice) Bytes queued per tunnelled connection before it is closed.", kSluice},
      {"window-extension", &o.window_extension,
       "(sluice) Per-connection flow control with agents that offer it too (sluice's): a "
       "client that reads nothing pauses only its own connection.",
       kSluice},
      {"stall-timeout", &o.stall_timeout,
       "(sluice) With an agent without the window extension: a client that reads nothing "
       "for this long while bytes wait for it is closed.",
       kSluice},
      {"http-header-timeout", &o.http_header_timeout,
       "(sluice) Time an HTTP CONNECT client has to finish its TLS handshake and send its "
       "request head (408 after it).",
       kSluice},
      {"max-http-header-bytes", &o.max_http_header_bytes,
       "(sluice) Largest HTTP CONNECT request head (431 beyond it).", kSluice},
      {"max-pending-dials-per-client", &o.max_pending_dials_per_client,
       "(sluice) Dials one frontend client (an IP, or the Unix socket) may await at once; "
       "beyond it a dial fails at once (HTTP CONNECT: 429).",
       kSluice},
      {"max-agents", &o.max_agents,
       "(sluice) Agent streams connected at once; beyond it a new one is refused "
       "(RESOURCE_EXHAUSTED) and the agent retries.",
       kSluice},
      {"max-tunnels-per-client", &o.max_tunnels_per_client,
       "(sluice) Tunnels (pending or established) one frontend client (an IP, or the Unix "
       "socket) may hold open; beyond it a dial fails at once.",
       kSluice},
      {"max-tunnels-per-agent", &o.max_tunnels_per_agent,
       "(sluice) Tunnels one agent stream may carry; a full agent is passed over, and a dial "
       "that only full agents could take fails at once.",
       kSluice},
      {"max-queued-bytes", &o.max_queued_bytes,
       "(sluice) Bytes queued across all tunnelled connections; past it, a connection that "
       "queues more pauses the stream it reads from until it drains.",
       kSluice},
      {"max-pending-token-reviews-per-client", &o.max_pending_token_reviews_per_client,
       "(sluice) TokenReviews one agent address may have queued; more are refused "
       "(UNAVAILABLE) and the agent retries.",
       kSluice},
      {"shutdown-grace-period", &o.shutdown_grace_period,
       "(sluice) After SIGTERM, how long open tunnels may finish before the server stops "
       "(new dials are refused meanwhile; a second signal stops at once).",
       kSluice},
  };
  for (std::vector<O> more : {wire::UpstreamCommonOptions(o.common), base::KlogOptions(o.klog)}) {
    table.insert(table.end(), more.begin(), more.end());
  }
  return table;
}

void RegisterServerFlags(base::FlagSet& f, ServerOptions& o) {
  base::RegisterOptions(f, ServerOptionTable(o));
}

absl::Status ValidateServerOptions(ServerOptions& o) {
  if (o.mode != "grpc" && o.mode != "http-connect") {
    return absl::InvalidArgumentError("--mode: want grpc or http-connect, got \"" + o.mode + "\"");
  }
  if (o.uds_name.empty() &&
      (o.server_cert.empty() || o.server_key.empty() || o.server_ca_cert.empty())) {
    return absl::InvalidArgumentError(
        "a TCP frontend needs --server-cert, --server-key and --server-ca-cert (mTLS); "
        "or use --uds-name");
  }
  if (o.cluster_cert.empty() || o.cluster_key.empty()) {
    return absl::InvalidArgumentError("the agent port needs --cluster-cert and --cluster-key");
  }
  if (!o.agent_namespace.empty() || !o.agent_service_account.empty() ||
      !o.authentication_audience.empty()) {
    if (o.agent_namespace.empty() || o.agent_service_account.empty() ||
        o.authentication_audience.empty()) {
      return absl::InvalidArgumentError(
          "service-account authentication needs all of --agent-namespace, "
          "--agent-service-account and --authentication-audience");
    }
    if (!o.cluster_ca_cert.empty() || !o.agent_token_file.empty()) {
      return absl::InvalidArgumentError(
          "service-account authentication (--agent-namespace) excludes --cluster-ca-cert and "
          "--agent-token-file: choose one way to authenticate agents");
    }
  }
  RETURN_IF_ERROR(wire::ValidateUpstreamCommon(o.common));
  // As upstream's Validate(): a TCP frontend on a reserved port is a mistake (0, which upstream
  // refuses too, stays allowed: tests take a free port that way).
  if (o.uds_name.empty() && o.server_port > 0 && o.server_port < 1024) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.server_port,
                                                   "\" for flag --server-port: a reserved port "
                                                   "(below 1024); choose another, as upstream "
                                                   "requires"));
  }
  if (o.common.xfr_channel_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", o.common.xfr_channel_size,
                                                   "\" for flag --xfr-channel-size: must be "
                                                   "greater than 0 (as upstream)"));
  }
  if (o.server_count < 1) {
    return absl::InvalidArgumentError("--server-count must be at least 1");
  }
  if (o.max_http_header_bytes < 1024 || o.max_pending_dials_per_client < 1 || o.max_agents < 1 ||
      o.max_tunnels_per_client < 1 || o.max_tunnels_per_agent < 1 ||
      o.max_pending_token_reviews_per_client < 1) {
    return absl::InvalidArgumentError(
        "--max-http-header-bytes must be at least 1024; --max-pending-dials-per-client, "
        "--max-agents, --max-tunnels-per-client, --max-tunnels-per-agent and "
        "--max-pending-token-reviews-per-client at least 1");
  }
  if (o.max_queued_bytes < o.max_connection_buffer) {
    return absl::InvalidArgumentError(
        "--max-queued-bytes must be at least --max-connection-buffer");
  }
  if (o.stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--stall-timeout must be positive");
  }
  if (o.kubeconfig_qps < 0 || o.kubeconfig_burst < 0) {
    return absl::InvalidArgumentError("--kubeconfig-qps and --kubeconfig-burst must be >= 0");
  }
  absl::StatusOr<std::string> ciphers = wire::OpenSslCipherList(o.cipher_suites);
  if (!ciphers.ok()) {
    return ciphers.status();
  }
  o.cipher_list = *ciphers;
  if (const char* env = std::getenv("PROXY_SERVER_ID"); o.server_id.empty() && env != nullptr) {
    o.server_id = env;
  }
  if (o.server_id.empty()) {
    o.server_id = wire::RandomUuid();  // upstream's default
  }
  return absl::OkStatus();
}

void WarnIgnoredServerFlags(const base::FlagSet& flags, ServerOptions& o) {
  wire::WarnIgnoredFlags(flags, ServerOptionTable(o));
  if (flags.Changed("kube-api-content-type") && o.kube_api_content_type != "application/json") {
    LOG(WARNING) << "--kube-api-content-type=" << o.kube_api_content_type
                 << ": TokenReview requests are sent as application/json";
  }
}

}  // namespace sluice::tunnel::server
