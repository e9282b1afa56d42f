// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/server_stream.h"

#include "absl/strings/numbers.h"
#include "lib/base/log.h"

namespace sluice::tunnel::agent {
namespace {

std::string Header(const grpc::ClientContext& ctx, const char* name) {
  auto it = ctx.GetServerInitialMetadata().find(name);
  return it == ctx.GetServerInitialMetadata().end()
             ? ""
             : std::string(it->second.data(), it->second.size());
}

}  // namespace

ServerStream::ServerStream(Owner& owner, const Setup& setup,
                           const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
                           std::promise<bool> ready)
    : owner_(owner),
      window_(setup.window),
      loop_(setup.loop),
      stub_(::AgentService::NewStub(channel)),
      outbox_(std::make_shared<StreamOutbox>([this](const wire::Packet* p) { StartWrite(p); })),
      ready_(std::move(ready)) {
  session_ = std::make_shared<ServerSession>(setup.loop, setup.resolver, setup.metrics,
                                             setup.policy, outbox_, gate_);
  context_.AddMetadata("agentid", setup.agent_id);
  if (!setup.identifiers.empty()) {
    context_.AddMetadata("agentidentifiers", setup.identifiers);
  }
  if (!token.empty()) {
    context_.AddMetadata("authorization", "Bearer " + token);
  }
  if (window_ > 0) {
    context_.AddMetadata(wire::kWindowHeader, std::to_string(window_));
  }
  stub_->async()->Connect(&context_, this);
  // Writes start from the tunnel loop, outside reactions, so the stream needs a hold (gRPC
  // ClientBidiReactor::AddHold). Released once the read side ends and the Outbox is closed.
  AddHold();
  // The first read starts in OnReadInitialMetadataDone: the callback API may run that
  // reaction and a first OnReadDone concurrently, and the session must know the server's
  // window before it handles any packet.
}

void ServerStream::OnReadInitialMetadataDone(bool ok) {
  Negotiate(ok);
  StartRead(&in_);  // fails at once on a failed or cancelled call, ending the read side
}

void ServerStream::Negotiate(bool ok) {
  if (!ok) {
    Resolve(false);
    return;
  }
  // An upstream server sends no such header (and never sees our credits): then 0.
  session_->Negotiated(window_ > 0 ? wire::ParseWindow(Header(context_, wire::kWindowHeader)) : 0);
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
  const bool fresh = owner_.OnStreamReady(this, server_id_, count);
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
  if (!server_id_.empty()) {
    LOG(INFO) << "stream to server " << server_id_ << " ended: " << status.error_message()
              << " (code " << status.error_code() << ")";
  } else if (!status.ok()) {
    LOG(WARNING) << "connect to proxy server failed: " << status.error_message() << " (code "
                 << status.error_code() << ")";
  }
  outbox_->Close();
  loop_.Post([session = session_] { session->Teardown(); });
  std::shared_ptr<grpc::Channel> channel = owner_.OnStreamDone(this);
  // The context (holding the call) and the stub (holding a channel reference) must be gone
  // before ~TunnelAgent may return: freeing them on this gRPC thread while the process exits
  // tripped gRPC 1.51's refcount check ("ref_counted.h: assertion failed: prior > 0").
  Owner& owner = owner_;
  delete this;
  owner.OnStreamGone(std::move(channel));  // after this ~TunnelAgent may proceed
}

void ServerStream::Resolve(bool ready) {
  absl::MutexLock lock(&mu_);
  if (!resolved_) {
    resolved_ = true;
    ready_.set_value(ready);
  }
}

}  // namespace sluice::tunnel::agent
