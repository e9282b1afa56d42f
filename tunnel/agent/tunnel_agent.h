// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/event/loop_thread.h"

#include "tunnel/agent/agent_metrics.h"
#include "tunnel/agent/allow_list.h"
#include "tunnel/agent/backend_conn.h"
#include "tunnel/agent/resolver.h"
#include "tunnel/agent/server_stream.h"
#include "tunnel/agent/tls_relay.h"
#include "tunnel/wire/tls.h"

namespace sluice::tunnel::agent {

struct TunnelAgentConfig {
  // host:port of the proxy server(s). One address is usually a load balancer (upstream's
  // model); several are dialled in turn until servercount distinct servers are held.
  std::vector<std::string> servers;
  std::string ca_cert, agent_cert, agent_key;
  std::string token_path;  // bearer token file, re-read on every connect
  std::string agent_id;
  std::string identifiers;  // URL-query encoded, sent as the agentidentifiers header
  absl::Duration sync_interval = absl::Seconds(1);
  absl::Duration sync_interval_cap = absl::Seconds(10);
  absl::Duration probe_interval = absl::Seconds(1);
  absl::Duration keepalive_time = absl::Hours(1);
  // Empty: all but the node's private destinations (AllowList).
  std::vector<std::string> allowed_destinations;
  std::vector<uint16_t> own_ports;  // the hosting process's status ports, denied by default
  size_t max_connection_buffer = 16 << 20;
  absl::Duration dial_timeout = absl::Seconds(5);
  // Announce (and use, with servers that announce it too) the per-connection window extension
  // (wire::kWindowHeader). Off: the agent speaks upstream's protocol only.
  bool window_extension = true;
  // With a server without the extension: how long a backend may read nothing while its bytes
  // are queued before the connection is cut (wire::StallWatch).
  absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout;
  // Offered in the TLS handshake (upstream's --alpn-proto), then "h2". Non-empty: the agent
  // makes its own TLS connections (TlsRelay), as gRPC 1.51 offers only its own protocols.
  std::vector<std::string> alpn_protos;
  // Upstream's --count-server-leases: the number of servers from their Leases (LeaseCounter)
  // rather than from the servercount they announce, or (server_count_max, upstream's
  // --server-count-source=max) the larger of the two.
  std::function<int()> lease_count;
  bool server_count_max = false;
  // The process's clock (outlives the agent): the loop's deadlines and the sync backoff.
  const base::Clock* clock = &base::RealClock::Get();
};

// The tunnel agent: keeps one AgentService stream to each of servercount distinct servers,
// reconnecting with backoff, and serves their dials. Owns a sync thread, the loop thread for
// backend sockets and a resolver thread. Thread-safe public methods.
class TunnelAgent final : public ServerStream::Owner {
 public:
  static absl::StatusOr<std::unique_ptr<TunnelAgent>> Create(TunnelAgentConfig config,
                                                             base::Registry& registry);
  // Cancels every stream and waits for them and their connections to finish.
  ~TunnelAgent() override;
  TunnelAgent(const TunnelAgent&) = delete;
  TunnelAgent& operator=(const TunnelAgent&) = delete;

  // Sends DRAIN on every server stream (first SIGTERM); serving continues.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  int ConnectedServers() const ABSL_LOCKS_EXCLUDED(mu_);

  // ServerStream::Owner (gRPC threads)
  bool OnStreamReady(ServerStream* stream, const std::string& server_id, int server_count) override
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<grpc::Channel> OnStreamDone(ServerStream* stream) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnStreamGone(std::shared_ptr<grpc::Channel> channel) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TunnelAgent(TunnelAgentConfig config, base::Registry& registry, AllowList allow,
              std::shared_ptr<grpc::ChannelCredentials> creds,
              std::unique_ptr<wire::TlsContext> alpn_tls,
              std::unique_ptr<event::LoopThread> io_thread);
  // A channel to `server`: gRPC's TLS, or plaintext gRPC through a TlsRelay with ALPN.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> NewChannel(const std::string& server,
                                                            const grpc::ChannelArguments& args,
                                                            std::shared_ptr<TlsRelay>* relay);
  void SyncLoop();
  bool ConnectOnce(const std::string& server);
  // How many distinct servers to hold, given the count servers announce.
  int WantedServers(int announced);
  void Barrier();

  const TunnelAgentConfig config_;
  AgentMetrics metrics_;
  const AllowList allow_;
  DialPolicy policy_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  std::unique_ptr<wire::TlsContext> alpn_tls_;  // set when alpn_protos is
  std::unique_ptr<event::LoopThread> io_thread_;
  event::EventLoop& loop_;  // io_thread_'s
  GetaddrinfoResolver resolver_;
  base::Waiter sleep_;  // the sync thread's: probe interval and backoff; stopped at destruction
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int live_streams_ ABSL_GUARDED_BY(mu_) = 0;                         // reactors not yet deleted
  std::map<std::string, ServerStream*> active_ ABSL_GUARDED_BY(mu_);  // by server ID
  std::set<ServerStream*> all_ ABSL_GUARDED_BY(mu_);                  // every stream not yet done
  // Channels are released on the sync thread, never in a reaction: dropping the last channel
  // reference inside OnDone tripped gRPC 1.51's callback-CQ refcount check
  // ("ref_counted.h: assertion failed: prior > 0" in grpc_cq_internal_unref).
  std::map<ServerStream*, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::map<ServerStream*, std::shared_ptr<TlsRelay>> relays_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<grpc::Channel>> released_ ABSL_GUARDED_BY(mu_);
  int server_count_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sync_;
};

}  // namespace sluice::tunnel::agent
