// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <future>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "agent.grpc.pb.h"
#include "grpcpp/grpcpp.h"

#include "tunnel/agent/server_session.h"
#include "tunnel/wire/packet.h"
#include "tunnel/wire/read_gate.h"

namespace sluice::tunnel::agent {

// One AgentService/Connect stream to a proxy server. Owns itself: deleted in OnDone. Packets
// read go to its ServerSession on the tunnel loop; writes go through the shared Outbox, so nothing
// here blocks a gRPC thread. Reactions run on gRPC threads.
class ServerStream final : public StreamReactor {
 public:
  // What keeps the streams (the TunnelAgent): told of each stream's life, on gRPC threads.
  class Owner {
   public:
    virtual ~Owner() = default;
    // Initial metadata named `server_id`; false when a stream to that server is already up.
    virtual bool OnStreamReady(ServerStream* stream, const std::string& server_id,
                               int server_count) = 0;
    // The stream is done: the owner unlists it and hands back its channel, which the stream
    // returns through OnStreamGone once deleted (no reaction drops a channel's last reference).
    virtual std::shared_ptr<grpc::Channel> OnStreamDone(ServerStream* stream) = 0;
    // The stream is deleted; the owner may go once every stream has said so.
    virtual void OnStreamGone(std::shared_ptr<grpc::Channel> channel) = 0;
  };

  // What a stream's session uses, all owned by the agent and outliving the stream.
  struct Setup {
    event::EventLoop& loop;  // the tunnel loop: sessions and backend sockets
    Resolver& resolver;
    AgentMetrics& metrics;
    const DialPolicy& policy;
    const std::string& agent_id;
    const std::string& identifiers;  // URL-query encoded; empty: none sent
    int64_t window = 0;  // announced for per-connection flow control; 0: the extension is off
  };

  // Prepares the call; Start() starts it. `ready` gets true once initial metadata named a new
  // server.
  ServerStream(Owner& owner, const Setup& setup, const std::shared_ptr<grpc::Channel>& channel,
               const std::string& token, std::promise<bool> ready);
  // Separate from construction so that the owner can list the stream under its lock first
  // and start it without holding a lock across gRPC. A Cancel() before it still ends the call.
  void Start() { StartCall(); }

  void Cancel() { context_.TryCancel(); }
  ServerSession& session() { return *session_; }
  const std::string& server_id() const { return server_id_; }

  // grpc::ClientBidiReactor
  void OnReadInitialMetadataDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { (void)outbox_->OnWriteDone(ok); }
  void OnDone(const grpc::Status& status) override;

 private:
  // Reads the server's headers (serverid, servercount, its window); may cancel a duplicate.
  void Negotiate(bool ok);
  void Resolve(bool ready);
  // Once, from the final OnReadDone.
  void EndWrites();

  Owner& owner_;
  const int64_t window_;
  event::EventLoop& loop_;
  // The stub holds a channel reference; it must outlive the context (and its call).
  std::unique_ptr<::AgentService::Stub> stub_;
  grpc::ClientContext context_;
  std::shared_ptr<StreamOutbox> outbox_;
  std::shared_ptr<ServerSession> session_;
  std::shared_ptr<wire::ReadGate> gate_ =
      std::make_shared<wire::ReadGate>([this] { StartRead(&in_); });
  wire::Packet in_;
  std::string server_id_;
  absl::Mutex mu_;
  std::promise<bool> ready_ ABSL_GUARDED_BY(mu_);
  bool resolved_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::tunnel::agent
