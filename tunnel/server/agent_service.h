// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "agent.grpc.pb.h"

#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"
#include "tunnel/server/token_review.h"
#include "tunnel/wire/byte_budget.h"

namespace sluice::tunnel::server {

// Static bearer tokens for agents outside Kubernetes. File format: one token per line,
// optionally "token,agent-id" to bind it to one agent ID; blank lines and # comments ignored.
class TokenFile final {
 public:
  static absl::StatusOr<TokenFile> Load(const std::string& path);
  // True if `authorization` is "Bearer <token>" for a listed token allowed for `agent_id`.
  bool Allows(const std::string& authorization, const std::string& agent_id) const;

 private:
  std::map<std::string, std::string> tokens_;  // token -> agent id ("" = any)
};

struct AgentServiceOptions {
  std::string server_id;
  int server_count = 1;
  // At most one of these; neither: no token check (mTLS or unauthenticated).
  const TokenFile* tokens = nullptr;
  TokenReviewer* reviewer = nullptr;
  wire::ByteBudget* budget = nullptr;  // server-wide; charged by the streams' outboxes
  // Our receive window per connection, announced to agents that announce theirs
  // (wire::kWindowHeader); 0: the extension is off and agents are served as upstream's.
  int64_t window = 0;
};

// AgentService/Connect: one reactor per agent stream (agent_service.cc). Thread-safe.
class AgentService final : public ::AgentService::CallbackService {
 public:
  AgentService(AgentServiceOptions options, Router& router, ServerMetrics& metrics)
      : options_(std::move(options)), router_(router), metrics_(metrics) {}

  grpc::ServerBidiReactor<wire::Packet, wire::Packet>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  const AgentServiceOptions options_;
  Router& router_;
  ServerMetrics& metrics_;
};

}  // namespace sluice::tunnel::server
