// SPDX-License-Identifier: Apache-2.0
// Router: admission of agent streams and their binding to the node of their token.
#include "absl/strings/str_cat.h"

#include "tunnel/server/router.h"

namespace sluice::tunnel::server {

absl::Status Router::CheckAgent(const AgentLink* agent) const {
  absl::MutexLock lock(&mu_);
  return CheckAgentLocked(agent);
}

absl::Status Router::CheckAgentLocked(const AgentLink* agent) const {
  if (limits_.max_agent_streams > 0 && agent_streams_ >= limits_.max_agent_streams) {
    metrics_.limited.WithLabels({"agents"}).Inc();
    return absl::ResourceExhaustedError("too many agents");
  }
  absl::Status st = CheckNode(agent);
  if (!st.ok()) {
    metrics_.agent_refusals.WithLabels({"node_binding"}).Inc();
  }
  return st;
}

absl::Status Router::CheckNode(const AgentLink* agent) const {
  const std::string& node = agent->node();
  const AgentIdentifiers& ids = agent->identifiers();
  auto of = [](const std::string& n) { return n.empty() ? std::string("no node") : "node " + n; };
  if (!node.empty()) {
    for (const std::string& name : ids.names) {
      if (name != node) {
        return absl::PermissionDeniedError(
            absl::StrCat("identifier host=", name, " is not the token's node ", node));
      }
    }
  }
  if (auto it = agents_.find(agent->agent_id());
      it != agents_.end() && it->second.front()->node() != node) {
    return absl::PermissionDeniedError(
        absl::StrCat("agent ID ", agent->agent_id(), " is held by an agent of ",
                     of(it->second.front()->node()), ", the token is for ", of(node)));
  }
  for (const auto* list : {&ids.hosts, &ids.cidrs}) {
    for (const std::string& id : *list) {
      if (auto c = claims_.find(id); c != claims_.end() && c->second.first != node) {
        return absl::PermissionDeniedError(
            absl::StrCat("identifier ", id, " is claimed by an agent of ", of(c->second.first),
                         ", the token is for ", of(node)));
      }
    }
  }
  return absl::OkStatus();
}

void Router::Claim(const AgentLink* agent, int delta) {
  const AgentIdentifiers& ids = agent->identifiers();
  for (const auto* list : {&ids.hosts, &ids.cidrs}) {
    for (const std::string& id : *list) {
      auto& [node, count] = claims_[id];
      node = agent->node();
      count += delta;
      if (count == 0) {
        claims_.erase(id);
      }
    }
  }
}

}  // namespace sluice::tunnel::server
