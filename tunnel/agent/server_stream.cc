// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/server_stream.h"

#include "absl/strings/numbers.h"
#include "lib/base/log.h"

#include "tunnel/agent/tunnel_agent.h"

namespace sluice::tunnel::agent {
namespace {

std::string Header(const grpc::ClientContext& ctx, const char* name) {
  auto it = ctx.GetServerInitialMetadata().find(name);
  return it == ctx.GetServerInitialMetadata().end()
             ? ""
             : std::string(it->second.data(), it->second.size());
}

}  // namespace

ServerStream::ServerStream(TunnelAgent& agent, const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& token, std::promise<bool> ready)
    : agent_(agent),
      stub_(::AgentService::NewStub(channel)),
      outbox_(std::make_shared<StreamOutbox>([this](const wire::Packet* p) {
        agent_.metrics_.packets.WithLabels({"from_agent", wire::TypeLabel(p->type())}).Inc();
        writing_type_.store(p->type(), std::memory_order_relaxed);
        StartWrite(p);
      })),
      ready_(std::move(ready)) {
  session_ = std::make_shared<ServerSession>(agent.loop_, agent.resolver_, agent.metrics_,
                                             agent.policy_, outbox_, gate_);
  context_.AddMetadata("agentid", agent.config_.agent_id);
  if (!agent.config_.identifiers.empty()) {
    context_.AddMetadata("agentidentifiers", agent.config_.identifiers);
  }
  if (!token.empty()) {
    context_.AddMetadata("authorization", "Bearer " + token);
  }
  stub_->async()->Connect(&context_, this);
  // Writes start from the tunnel loop, outside reactions, so the stream needs a hold (gRPC
  // ClientBidiReactor::AddHold). Released once the read side ends and the Outbox is closed.
  AddHold();
  StartRead(&in_);
}

void ServerStream::OnReadInitialMetadataDone(bool ok) {
  if (!ok) {
    Resolve(false);
    return;
  }
  server_id_ = Header(context_, "serverid");
  int count = 1;
  if (!absl::SimpleAtoi(Header(context_, "servercount"), &count) || count < 1) {
    count = 1;
  }
  if (server_id_.empty()) {
    LOG(WARNING) << "proxy server sent no serverid header; closing the stream";
    Resolve(false);
    Cancel();
    return;
  }
  const bool fresh = agent_.OnStreamReady(this, server_id_, count);
  Resolve(fresh);
  if (!fresh) {
    VLOG(1) << "already connected to server " << server_id_ << "; closing duplicate";
    Cancel();
  }
}

void ServerStream::OnReadDone(bool ok) {
  if (!ok) {
    // The one claim on ending (ReadGate::Close, as the server's reactors finish): OnDone
    // closes the gate too, but never first, since it waits for the hold EndWrites removes.
    if (gate_->Close()) {
      EndWrites();
    }
    return;
  }
  agent_.metrics_.packets.WithLabels({"to_agent", wire::TypeLabel(in_.type())}).Inc();
  session_->Post(std::move(in_));
  in_.Clear();
  gate_->ReadNext();
}

void ServerStream::EndWrites() {
  outbox_->Close();  // after this no StartWrite can begin, so the hold may go
  RemoveHold();
}

void ServerStream::OnDone(const grpc::Status& status) {
  gate_->Close();  // the session keeps the gate; a later Release must not touch this reactor
  Resolve(false);
  // Upstream counts a failed Recv (and a failed Send) of a serving stream, whatever ended it,
  // except the end of stream; a stream we cancelled ourselves is no error here.
  if (!server_id_.empty() && !status.ok() && !cancelled_) {
    if (failed_write_type_ >= 0) {
      agent_.metrics_.stream_errors
          .WithLabels({"from_agent", wire::GrpcCodeName(status.error_code()),
                       wire::TypeLabel(failed_write_type_)})
          .Inc();
    }
    agent_.metrics_.stream_errors
        .WithLabels({"to_agent", wire::GrpcCodeName(status.error_code()), "Unknown"})
        .Inc();
  }
  if (!server_id_.empty()) {
    LOG(INFO) << "stream to server " << server_id_ << " ended: " << status.error_message()
              << " (code " << status.error_code() << ")";
  } else if (!status.ok()) {
    LOG(WARNING) << "connect to proxy server failed: " << status.error_message() << " (code "
                 << status.error_code() << ")";
  }
  outbox_->Close();
  agent_.loop_.Post([session = session_] { session->Teardown(); });
  std::shared_ptr<grpc::Channel> channel = agent_.OnStreamDone(this);
  // The context (holding the call) and the stub (holding a channel reference) must be gone
  // before ~TunnelAgent may return: freeing them on this gRPC thread while the process exits
  // tripped gRPC 1.51's refcount check ("ref_counted.h: assertion failed: prior > 0").
  TunnelAgent& agent = agent_;
  delete this;
  agent.OnStreamGone(std::move(channel));  // after this ~TunnelAgent may proceed
}

void ServerStream::Resolve(bool ready) {
  absl::MutexLock lock(&mu_);
  if (!resolved_) {
    resolved_ = true;
    ready_.set_value(ready);
  }
}

}  // namespace sluice::tunnel::agent
