// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "grpcpp/support/client_callback.h"

#include "tunnel/agent/agent_metrics.h"
#include "tunnel/agent/backend_conn.h"
#include "tunnel/wire/outbox.h"

namespace sluice::tunnel::agent {

using StreamReactor = grpc::ClientBidiReactor<wire::Packet, wire::Packet>;
using StreamOutbox = wire::Outbox;

// The agent's side of one server stream: the backend connections that stream carries.
// Packets from the server are posted here; replies go out through the stream's Outbox, which
// outlives the reactor. Thread: the tunnel loop's (Post from any thread).
class ServerSession final : public BackendConn::Owner,
                            public std::enable_shared_from_this<ServerSession> {
 public:
  ServerSession(event::EventLoop& loop, Resolver& resolver, AgentMetrics& metrics,
                const DialPolicy& policy, std::shared_ptr<StreamOutbox> outbox,
                std::shared_ptr<wire::ReadGate> gate);
  ~ServerSession() override;

  // Any thread, before the stream's first read: the server's answer to our window header
  // (wire::kWindowHeader), 0 if it has none (an upstream server). Windowed, connections pause
  // only themselves: a backend that reads nothing stops its server's credit, not the stream.
  void Negotiated(int64_t peer_window);
  // Any thread: hand a packet from the server to the loop.
  void Post(wire::Packet packet);
  // Loop thread. The stream ended: close every connection it carried.
  void Teardown();
  // Any thread.
  bool SendDrain() { return outbox_->Send(wire::MakeDrain()); }

  // BackendConn::Owner
  void OnDialDone(BackendConn& conn, const std::string& error) override;
  void OnBackendData(BackendConn& conn, std::string bytes) override;
  void OnBackendDone(BackendConn& conn, absl::Status reason) override;
  void OnBackendStalled(BackendConn& conn) override;
  void OnBackendCredit(BackendConn& conn, int64_t bytes) override;

 private:
  void Handle(wire::Packet packet);
  void HandleDial(const wire::Packet& packet);
  void HandleData(wire::Packet packet);
  void HandleClose(int64_t connect_id);
  void HandleCloseDial(int64_t random);
  void HandleCredit(const wire::Packet& packet);
  // Drops the connection on a later loop turn (we may be inside its callback); until then it
  // reports nothing (BackendConn::Abandon).
  void Retire(int64_t connect_id);

  event::EventLoop& loop_;
  Resolver& resolver_;
  AgentMetrics& metrics_;
  const DialPolicy policy_;
  std::shared_ptr<StreamOutbox> outbox_;
  std::shared_ptr<wire::ReadGate> gate_;  // the stream's reads, held by lagging backends
  std::map<int64_t, std::shared_ptr<BackendConn>> conns_;
  std::map<int64_t, int64_t> dialing_;  // random -> connectID, until the dial finishes
  int64_t next_id_ = 1;
  int64_t peer_window_ = 0;  // the server's window per connection; 0: no extension
  bool torn_down_ = false;
};

}  // namespace sluice::tunnel::agent
