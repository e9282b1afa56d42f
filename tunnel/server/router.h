// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"

#include "tunnel/server/links.h"
#include "tunnel/server/server_metrics.h"

namespace sluice::tunnel::server {

enum class Strategy { kDefault, kDestHost, kDefaultRoute };

// What peers may make the Router hold (0: no limit).
struct RouterLimits {
  size_t max_pending_dials_per_client = 0;  // dials a client's frontends await at once
  size_t max_agent_streams = 0;             // agent streams connected at once
  size_t max_tunnels_per_client = 0;        // a client's tunnels, pending or established
  size_t max_tunnels_per_agent = 0;         // one agent stream's tunnels, pending or established
};

// The frontend client a peer address counts against: its IP for TCP ("ipv4:10.0.0.1:5678",
// "ipv6:[fd00::1]:5678", "10.0.0.1:5678"), one client for a Unix socket.
std::string ClientOf(const std::string& peer);

// "default,destHost" -> strategies in order. Unknown names are an error.
absl::StatusOr<std::vector<Strategy>> ParseStrategies(const std::string& list);

// The server's backend manager: which agents are connected and which frontend owns which
// pending dial or established connection. Relays packets between AgentLinks and Frontends.
// Thread-safe: one mutex, held while delivering (delivery only queues, it never blocks).
class Router final {
 public:
  Router(std::vector<Strategy> strategies, ServerMetrics& metrics, RouterLimits limits = {});

  // Agent side (AgentService reactors). Not added: ResourceExhausted at max_agent_streams;
  // PermissionDenied when the agent's node claim conflicts with its identity (CheckNode).
  absl::Status AddAgent(AgentLink* agent) ABSL_LOCKS_EXCLUDED(mu_);
  // What AddAgent would answer now, without adding (and without counting): lets a stream be
  // refused before its response headers, which an agent would take for a connection.
  absl::Status CheckAgent(const AgentLink* agent) const ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the agent's pending dials and closes its established connections at once.
  void RemoveAgent(AgentLink* agent) ABSL_LOCKS_EXCLUDED(mu_);
  void SetDraining(AgentLink* agent) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDialResponse(AgentLink* agent, const wire::Packet& packet) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAgentData(AgentLink* agent, wire::Packet packet) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAgentClose(AgentLink* agent, const wire::Packet& packet) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAgentCredit(AgentLink* agent, const wire::Packet& packet) ABSL_LOCKS_EXCLUDED(mu_);
  // One packet from `agent`'s stream, already wire::Validate'd, to the handler above for its
  // type. False for a type agents do not send (the caller counts it).
  bool OnAgentPacket(AgentLink* agent, wire::Packet packet) ABSL_LOCKS_EXCLUDED(mu_);

  // Frontend side. Dial returns an error text for an immediate DIAL_RSP, or "" when the
  // request went to an agent. `client` (ClientOf) is what the pending-dial limit counts by.
  std::string Dial(Frontend* frontend, const wire::Packet& dial, const std::string& client = "")
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr char kTooManyDials[] = "too many pending dials from this client";
  static constexpr char kTooManyTunnels[] = "too many open connections from this client";
  static constexpr char kAgentsFull[] = "every agent holds its maximum of open connections";
  // False if the frontend has no established connection with this connectID.
  bool SendData(Frontend* frontend, wire::Packet data, absl::AnyInvocable<void()> on_written)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool Close(Frontend* frontend, int64_t connect_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The frontend's client took `bytes` more of the tunnel's data: grant them to a windowed
  // agent (nothing for an agent without the extension, or a tunnel gone).
  void Credit(Frontend* frontend, int64_t connect_id, int64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void CancelDial(Frontend* frontend, int64_t random) ABSL_LOCKS_EXCLUDED(mu_);
  // The frontend is going away: its dial is cancelled or its connection closed at the agent.
  void RemoveFrontend(Frontend* frontend) ABSL_LOCKS_EXCLUDED(mu_);

  int ReadyAgents() const ABSL_LOCKS_EXCLUDED(mu_);

  // Graceful shutdown: new dials fail with kShuttingDown; tunnels already made carry on.
  static constexpr char kShuttingDown[] = "proxy server is shutting down";
  void StopDialing() ABSL_LOCKS_EXCLUDED(mu_);
  bool stopped_dialing() const ABSL_LOCKS_EXCLUDED(mu_);
  // Tunnels pending or established.
  size_t Tunnels() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Tunnel {
    AgentLink* agent = nullptr;
    int64_t random = 0;
    int64_t connect_id = 0;  // 0 while the dial is pending
    base::MonoTime started;  // at the dial, for the dial-duration metric
    std::string client;
    std::string address;  // dialled, for the log
  };
  using Key = std::pair<AgentLink*, int64_t>;

  // Null if no agent fits; `full` tells whether some did but held max_tunnels_per_agent.
  AgentLink* Pick(const std::string& address, bool* full) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AgentLink* PickFrom(const std::vector<AgentLink*>& candidates, bool* full)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Binds an agent stream with a node claim to that node: every host= identifier must be the
  // node's name, and neither its agent ID nor any identifier may be held by a connected agent
  // of another node (or of none). Agents without a claim are bound to nothing among themselves.
  absl::Status CheckNode(const AgentLink* agent) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckAgentLocked(const AgentLink* agent) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Claim(const AgentLink* agent, int delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds or erases a tunnel, keeping the per-client and per-agent counts.
  void AddTunnel(Frontend* f, Tunnel t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropTunnel(Frontend* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeliverOrAbort(Frontend* frontend, wire::Packet packet,
                      const std::shared_ptr<wire::ReadGate>& gate)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(Frontend* frontend) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pending dial of `t` ended (answered, failed or cancelled).
  void Unpend(const Tunnel& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One line per tunnel at the default level, as upstream logs dials and closes.
  static void LogClosed(const Tunnel& t, const char* why);
  void UpdateGauges() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<Strategy> strategies_;
  ServerMetrics& metrics_;
  const RouterLimits limits_;
  mutable absl::Mutex mu_;
  bool stopped_dialing_ ABSL_GUARDED_BY(mu_) = false;
  // agent id -> its streams; the first one is used for routing.
  std::map<std::string, std::vector<AgentLink*>> agents_ ABSL_GUARDED_BY(mu_);
  std::set<AgentLink*> draining_ ABSL_GUARDED_BY(mu_);
  std::map<Frontend*, Tunnel> tunnels_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Frontend*> pending_ ABSL_GUARDED_BY(mu_);      // (agent, random)
  std::map<Key, Frontend*> established_ ABSL_GUARDED_BY(mu_);  // (agent, connectID)
  std::map<std::string, size_t> pending_by_client_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, size_t> tunnels_by_client_ ABSL_GUARDED_BY(mu_);
  std::map<const AgentLink*, size_t> tunnels_by_agent_ ABSL_GUARDED_BY(mu_);
  // Identifier (host, IP or CIDR) -> the node of the agents claiming it, and how many do.
  std::map<std::string, std::pair<std::string, size_t>> claims_ ABSL_GUARDED_BY(mu_);
  size_t agent_streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::tunnel::server
