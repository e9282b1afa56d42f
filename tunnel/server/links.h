// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"

#include "tunnel/wire/packet.h"
#include "tunnel/wire/read_gate.h"

namespace sluice::tunnel::server {

// What an agent advertised in its `agentidentifiers` header.
struct AgentIdentifiers {
  std::vector<std::string> hosts;  // host=, ipv4= and ipv6= values, brackets removed
  std::vector<std::string> names;  // the host= values alone
  std::vector<std::string> cidrs;
  bool default_route = false;
};

// Parses the URL-query encoded header ("host=a&ipv4=1.2.3.4&default-route=true"). Unknown
// keys are ignored, as upstream does.
AgentIdentifiers ParseAgentIdentifiers(const std::string& query);

// One agent stream as the Router sees it. Thread-safe.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  // Queues a packet toward the agent; `on_written` runs once gRPC took it. False if closed.
  virtual bool SendToAgent(wire::Packet packet, absl::AnyInvocable<void()> on_written) = 0;
  virtual const std::string& agent_id() const = 0;
  virtual const AgentIdentifiers& identifiers() const = 0;
  // The node its token was issued for (TokenReview's node claim); empty without one.
  virtual const std::string& node() const = 0;
  // The stream's read gate, which congested frontends hold (may be null in tests).
  virtual std::shared_ptr<wire::ReadGate> gate() = 0;
  // The agent's receive window per connection, when both sides announced the window extension
  // (wire::kWindowHeader); 0 for an agent without it (upstream's).
  virtual int64_t peer_window() const { return 0; }
};

// One frontend connection (a Proxy stream or an HTTP CONNECT client). The Router calls these
// with its lock held: they must not block or call back into the Router.
class Frontend {
 public:
  virtual ~Frontend() = default;
  // A packet from the agent for this frontend's tunnel, read from the stream behind `gate`
  // (null when the agent is windowed: its credit bounds the queue). A frontend over its high
  // watermark holds `gate` until it drains, for at most ReadGate::kStallGrace without progress
  // (wire::StallWatch). False means its hard bound overflowed; the Router then closes the
  // tunnel and calls Abort.
  virtual bool Deliver(wire::Packet packet, const std::shared_ptr<wire::ReadGate>& gate) = 0;
  // The tunnel's agent is windowed (`peer_window` per connection), called before its successful
  // DIAL_RSP is delivered: from then on the frontend sends no more than the agent's credit
  // (OnCredit) and grants back what its client took (Router::Credit).
  virtual void OnPeerWindow(int64_t /*peer_window*/) {}
  // The agent granted `bytes` more (SLUICE_CREDIT).
  virtual void OnCredit(int64_t /*bytes*/) {}
  // The tunnel is gone for good (overflow); the frontend finishes itself asynchronously.
  virtual void Abort(const std::string& why) = 0;
  // The frontend has finished: nothing more reaches its client (a DIAL_RSP for it is then
  // upstream's dial failure "send_rsp").
  virtual bool Finished() const { return false; }
};

}  // namespace sluice::tunnel::server
