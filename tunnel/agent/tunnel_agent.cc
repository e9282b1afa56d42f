// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/tunnel_agent.h"

#include <algorithm>
#include <future>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel_posix.h"
#include "grpcpp/grpcpp.h"
#include "lib/base/backoff.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "tunnel/wire/credentials.h"

namespace sluice::tunnel::agent {
namespace {

// Upstream servers answer pings more often than every 30 s with GOAWAY(too_many_pings).
constexpr absl::Duration kMinKeepalive = absl::Seconds(30);
constexpr absl::Duration kMetadataTimeout = absl::Seconds(15);

}  // namespace

absl::StatusOr<std::unique_ptr<TunnelAgent>> TunnelAgent::Create(TunnelAgentConfig config,
                                                                 base::Registry& registry) {
  if (config.servers.empty()) {
    return absl::InvalidArgumentError("tunnel agent: no proxy server address");
  }
  if (config.agent_id.empty()) {
    return absl::InvalidArgumentError("tunnel agent: empty agent ID");
  }
  ASSIGN_OR_RETURN(AllowList allow,
                   AllowList::Parse(config.allowed_destinations, config.own_ports));
  ASSIGN_OR_RETURN(auto creds,
                   wire::ClientTls(config.ca_cert, config.agent_cert, config.agent_key));
  std::unique_ptr<wire::TlsContext> alpn_tls;
  if (!config.alpn_protos.empty()) {
    std::vector<std::string> offered = config.alpn_protos;
    // As grpc-go's TLS credentials do with upstream's list: h2 last, unless listed.
    if (std::find(offered.begin(), offered.end(), "h2") == offered.end()) {
      offered.push_back("h2");
    }
    ASSIGN_OR_RETURN(alpn_tls, wire::TlsContext::CreateClient(config.ca_cert, config.agent_cert,
                                                              config.agent_key, offered));
  }
  ASSIGN_OR_RETURN(auto io_thread, event::LoopThread::Create("tunnel-agent", *config.clock));
  auto agent = std::unique_ptr<TunnelAgent>(
      new TunnelAgent(std::move(config), registry, std::move(allow), std::move(creds),
                      std::move(alpn_tls), std::move(io_thread)));
  agent->sync_ = std::thread([a = agent.get()] { a->SyncLoop(); });
  return agent;
}

TunnelAgent::TunnelAgent(TunnelAgentConfig config, base::Registry& registry, AllowList allow,
                         std::shared_ptr<grpc::ChannelCredentials> creds,
                         std::unique_ptr<wire::TlsContext> alpn_tls,
                         std::unique_ptr<event::LoopThread> io_thread)
    : config_(std::move(config)),
      metrics_(registry),
      allow_(std::move(allow)),
      creds_(std::move(creds)),
      alpn_tls_(std::move(alpn_tls)),
      io_thread_(std::move(io_thread)),
      loop_(io_thread_->loop()),
      sleep_(*config_.clock) {
  policy_.timeout = config_.dial_timeout;
  policy_.allow = &allow_;
  policy_.denied = &metrics_.dials_denied;
  policy_.max_queued = config_.max_connection_buffer;
  policy_.stall_timeout = config_.stall_timeout;
}

TunnelAgent::~TunnelAgent() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  sleep_.Stop();
  sync_.join();
  {
    absl::MutexLock lock(&mu_);
    for (ServerStream* stream : all_) {
      stream->Cancel();
    }
    auto all_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_streams_ == 0; };
    mu_.Await(absl::Condition(&all_done));
    released_.clear();
    for (auto& [stream, relay] : relays_) {
      relay->Close();
    }
    relays_.clear();
  }
  Barrier();  // session teardowns
  Barrier();  // the connections they retired
}

void TunnelAgent::Barrier() {
  std::promise<void> p;
  loop_.Post([&p] { p.set_value(); });
  p.get_future().wait();
}

void TunnelAgent::Drain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  for (auto& [id, stream] : active_) {
    (void)stream->session().SendDrain();
  }
}

int TunnelAgent::ConnectedServers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(active_.size());
}

bool TunnelAgent::OnStreamReady(ServerStream* stream, const std::string& server_id,
                                int server_count) {
  absl::MutexLock lock(&mu_);
  server_count_ = server_count;
  if (stop_ || active_.contains(server_id)) {
    return false;
  }
  active_[server_id] = stream;
  metrics_.open_server_connections.Set(static_cast<double>(active_.size()));
  if (draining_) {
    (void)stream->session().SendDrain();
  }
  LOG(INFO) << "connected to proxy server " << server_id << " (" << active_.size() << "/"
            << server_count << ")";
  return true;
}

std::shared_ptr<grpc::Channel> TunnelAgent::OnStreamDone(ServerStream* stream) {
  absl::MutexLock lock(&mu_);
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if (it->second == stream) {
      active_.erase(it);
      break;
    }
  }
  metrics_.open_server_connections.Set(static_cast<double>(active_.size()));
  all_.erase(stream);
  std::shared_ptr<grpc::Channel> channel;
  if (auto it = channels_.find(stream); it != channels_.end()) {
    channel = std::move(it->second);
    channels_.erase(it);
  }
  if (auto it = relays_.find(stream); it != relays_.end()) {
    it->second->Close();  // its gRPC connection is over
    relays_.erase(it);
  }
  return channel;
}

void TunnelAgent::OnStreamGone(std::shared_ptr<grpc::Channel> channel) {
  absl::MutexLock lock(&mu_);
  released_.push_back(std::move(channel));  // dropped on the sync thread or in ~TunnelAgent
  --live_streams_;
}

int TunnelAgent::WantedServers(int announced) {
  if (!config_.lease_count) {
    return announced;
  }
  const int leases = config_.lease_count();
  if (config_.server_count_max) {
    return std::max({announced, leases, 1});
  }
  return leases > 0 ? leases : announced;  // no Lease seen yet: what servers say
}

void TunnelAgent::SyncLoop() {
  // Jittered below the interval (never above the cap), so that the agents of every node, cut
  // off by one server restart, do not all reconnect in the same instant.
  base::Backoff backoff({.initial = config_.sync_interval,
                         .max = config_.sync_interval_cap,
                         .jitter_min = 0.8,
                         .jitter_max = 1.0});
  size_t next = 0;
  while (true) {
    int have, want;
    std::vector<std::shared_ptr<grpc::Channel>> released;
    {
      absl::MutexLock lock(&mu_);
      released.swap(released_);
      if (stop_) {
        return;
      }
      have = static_cast<int>(active_.size());
      want = server_count_;
    }
    want = WantedServers(want);
    metrics_.known_server_count.Set(want);
    if (have >= want) {
      backoff.Reset();
      if (!sleep_.SleepFor(config_.probe_interval)) {
        return;
      }
      continue;
    }
    const std::string& server = config_.servers[next++ % config_.servers.size()];
    if (ConnectOnce(server)) {
      backoff.Reset();
      continue;
    }
    if (!sleep_.SleepFor(backoff.Next())) {
      return;
    }
  }
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> TunnelAgent::NewChannel(
    const std::string& server, const grpc::ChannelArguments& args,
    std::shared_ptr<TlsRelay>* relay) {
  if (alpn_tls_ == nullptr) {
    return grpc::CreateCustomChannel(server, creds_, args);
  }
  ASSIGN_OR_RETURN(TlsRelay::Started started, TlsRelay::Start(loop_, *alpn_tls_, server));
  *relay = std::move(started.relay);
  // gRPC owns the fd from here; a failure closes it and the relay ends on its EOF.
  return grpc::CreateCustomInsecureChannelFromFd(server, started.grpc_fd.Release(), args);
}

bool TunnelAgent::ConnectOnce(const std::string& server) {
  std::string token;
  if (!config_.token_path.empty()) {
    auto t = base::ReadFile(config_.token_path, 64 * 1024);
    if (!t.ok()) {
      LOG(WARNING) << "service account token: " << t.status();
      return false;
    }
    token = std::string(absl::StripAsciiWhitespace(*t));
  }
  grpc::ChannelArguments args;
  // A fresh TCP connection per stream: through a load balancer each may reach another server.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(
      GRPC_ARG_KEEPALIVE_TIME_MS,
      static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(std::max(config_.keepalive_time, kMinKeepalive)), INT32_MAX)));
  args.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  std::shared_ptr<TlsRelay> relay;
  auto made = NewChannel(server, args, &relay);
  if (!made.ok()) {
    LOG(WARNING) << "proxy server " << server << ": " << made.status();
    return false;
  }
  std::shared_ptr<grpc::Channel> channel = std::move(*made);
  std::promise<bool> ready;
  std::future<bool> fresh = ready.get_future();
  ServerStream* stream;
  {
    absl::MutexLock lock(&mu_);
    ++live_streams_;
    stream = new ServerStream(
        *this,
        {.loop = loop_,
         .resolver = resolver_,
         .metrics = metrics_,
         .policy = policy_,
         .agent_id = config_.agent_id,
         .identifiers = config_.identifiers,
         .window = config_.window_extension ? wire::WindowFor(config_.max_connection_buffer) : 0},
        channel, token, std::move(ready));  // owns itself once started
    all_.insert(stream);
    channels_[stream] = std::move(channel);
    if (relay != nullptr) {
      relays_[stream] = std::move(relay);
    }
  }
  stream->Start();  // listed first, so OnStreamDone always finds it
  if (fresh.wait_for(std::chrono::milliseconds(absl::ToInt64Milliseconds(kMetadataTimeout))) !=
      std::future_status::ready) {
    LOG(WARNING) << "proxy server " << server << ": no serverid header within " << kMetadataTimeout;
    absl::MutexLock lock(&mu_);
    if (all_.contains(stream)) {
      stream->Cancel();
    }
    return false;
  }
  return fresh.get();
}

}  // namespace sluice::tunnel::agent
