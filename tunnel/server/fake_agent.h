// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tunnel/server/router.h"

namespace sluice::tunnel::server {

// An agent stream for Router tests: records what the Router sends it and completes each write
// at once. Thread: the test's.
class FakeAgent final : public AgentLink {
 public:
  explicit FakeAgent(std::string id, const std::string& ids = "", std::string node = "")
      : id_(std::move(id)), node_(std::move(node)) {
    ids_ = ParseAgentIdentifiers(ids);
  }
  bool SendToAgent(wire::Packet p, absl::AnyInvocable<void()> done) override {
    sent.push_back(p);
    if (done) {
      done();
    }
    return true;
  }
  const std::string& agent_id() const override { return id_; }
  const AgentIdentifiers& identifiers() const override { return ids_; }
  const std::string& node() const override { return node_; }
  std::shared_ptr<wire::ReadGate> gate() override { return read_gate; }
  int64_t peer_window() const override { return window; }
  std::vector<wire::Packet> sent;
  int64_t window = 0;                         // > 0: the agent announced the window extension
  std::shared_ptr<wire::ReadGate> read_gate;  // the stream's reads, if a test watches them

 private:
  std::string id_;
  AgentIdentifiers ids_;
  std::string node_;
};

}  // namespace sluice::tunnel::server
