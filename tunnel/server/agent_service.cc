// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/agent_service.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/file.h"
#include "lib/base/log.h"

#include "tunnel/wire/outbox.h"

namespace sluice::tunnel::server {
namespace {

using Reactor = grpc::ServerBidiReactor<wire::Packet, wire::Packet>;

std::string OneHeader(const grpc::CallbackServerContext& ctx, const char* name, int* count) {
  auto range = ctx.client_metadata().equal_range(name);
  *count = static_cast<int>(std::distance(range.first, range.second));
  return *count == 0 ? "" : std::string(range.first->second.data(), range.first->second.size());
}

// One agent's stream. Owns itself: deleted in OnDone. Reactions run on gRPC threads.
class AgentStream final : public Reactor, public AgentLink {
 public:
  AgentStream(grpc::CallbackServerContext* ctx, const AgentServiceOptions& options, Router& router,
              ServerMetrics& metrics)
      : ctx_(ctx),
        options_(options),
        router_(router),
        metrics_(metrics),
        outbox_(
            [this](const wire::Packet* p) {
              writing_type_.store(p->type(), std::memory_order_relaxed);
              StartWrite(p);
            },
            options.budget) {
    metrics_.grpc_connections.WithLabels({"Connect"}).Add(1);
    absl::Status st = Authenticate();
    if (st.ok() && options_.reviewer != nullptr) {
      int n = 0;
      std::string auth = OneHeader(*ctx_, "authorization", &n);
      reviewing_ = true;
      // Finish waits for the verdict (see OnCancel), so this stream outlives the callback.
      options_.reviewer->Review(n == 1 ? std::move(auth) : "", ClientOf(ctx_->peer()),
                                [this](ReviewResult verdict) { OnReviewed(std::move(verdict)); });
      return;
    }
    Admit(st);
  }

  // AgentLink
  bool SendToAgent(wire::Packet p, absl::AnyInvocable<void()> on_written) override {
    if (p.type() != SLUICE_CREDIT) {  // upstream's metric keeps upstream's packet types
      metrics_.packets.WithLabels({"to_agent", wire::TypeLabel(p.type())}).Inc();
    }
    return outbox_.Send(std::move(p), std::move(on_written));
  }
  const std::string& agent_id() const override { return agent_id_; }
  const AgentIdentifiers& identifiers() const override { return identifiers_; }
  const std::string& node() const override { return node_; }
  std::shared_ptr<wire::ReadGate> gate() override { return gate_; }
  int64_t peer_window() const override { return peer_window_; }

  // grpc::ServerBidiReactor
  void OnSendInitialMetadataDone(bool) override {}
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override {
    if (!ok) {
      metrics_.StreamError("to_agent", grpc::StatusCode::CANCELLED,
                           wire::TypeLabel(writing_type_.load(std::memory_order_relaxed)));
    }
    (void)outbox_.OnWriteDone(ok);
  }
  // A parked read would otherwise keep a cancelled stream from ever reaching OnDone. During a
  // token review the verdict finishes it instead.
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (reviewing_) {
        return;
      }
    }
    if (registered_) {
      metrics_.StreamError("from_agent", grpc::StatusCode::CANCELLED);  // Recv's error upstream
    }
    FinishOnce(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    if (registered_) {
      router_.RemoveAgent(this);
      LOG(INFO) << "agent " << agent_id_ << " disconnected";
    }
    metrics_.grpc_connections.WithLabels({"Connect"}).Add(-1);
    delete this;
  }

 private:
  // Reads the agent's headers; checks a static token.
  absl::Status Authenticate();
  void OnReviewed(ReviewResult verdict) {
    {
      absl::MutexLock lock(&mu_);
      reviewing_ = false;
      if (cancelled_) {
        verdict = absl::CancelledError("cancelled during the token review");
      }
    }
    if (verdict.ok()) {
      node_ = std::move(verdict->node);  // before Admit registers us with the Router
    }
    Admit(verdict.status());
  }
  // Serves the stream, or ends it with the authentication error.
  void Admit(const absl::Status& st) {
    if (!st.ok()) {
      LOG(WARNING) << "agent stream from " << ctx_->peer() << " rejected: " << st.message();
      FinishOnce(grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message())));
      return;
    }
    // Refused before the headers, which the agent would take for a connection (and retry at
    // once); AddAgent checks again, atomically.
    absl::Status added = router_.CheckAgent(this);
    if (added.ok()) {
      // The upstream agent blocks until it sees these, so they go out before any message.
      ctx_->AddInitialMetadata("serverid", options_.server_id);
      ctx_->AddInitialMetadata("servercount", std::to_string(options_.server_count));
      if (peer_window_ > 0) {
        ctx_->AddInitialMetadata(wire::kWindowHeader, std::to_string(options_.window));
      }
      StartSendInitialMetadata();
      added = router_.AddAgent(this);
    }
    if (!added.ok()) {
      LOG(WARNING) << "agent " << agent_id_ << " from " << ctx_->peer() << " refused: "
                   << (absl::IsResourceExhausted(added)
                           ? std::string("the server holds --max-agents streams")
                           : std::string(added.message()));
      FinishOnce(
          grpc::Status(static_cast<grpc::StatusCode>(added.code()), std::string(added.message())));
      return;
    }
    LOG(INFO) << "agent " << agent_id_ << " connected from " << ctx_->peer()
              << (node_.empty() ? "" : " for node " + node_);
    registered_ = true;
    StartRead(&in_);
  }
  // Reads go through the gate: congested frontends hold it, and no read starts once Finish
  // is claimed (OnCancel may race with a read completing).
  void ReadNext() { gate_->ReadNext(); }
  void FinishOnce(grpc::Status status) {
    if (!gate_->Close()) {
      return;
    }
    outbox_.Close();
    Finish(std::move(status));
  }

  grpc::CallbackServerContext* const ctx_;
  const AgentServiceOptions& options_;
  Router& router_;
  ServerMetrics& metrics_;
  std::atomic<int> writing_type_{0};  // of the write in flight, for stream_errors_total
  wire::Outbox outbox_;
  absl::Mutex mu_;
  bool reviewing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::string agent_id_;
  AgentIdentifiers identifiers_;
  std::string node_;         // set once, before the Router sees us
  int64_t peer_window_ = 0;  // the agent's window; set once, before the Router sees us
  wire::Packet in_;
  std::atomic<bool> registered_{false};  // OnCancel reads it on another thread
  std::shared_ptr<wire::ReadGate> gate_ =
      std::make_shared<wire::ReadGate>([this] { StartRead(&in_); });
};

absl::Status AgentStream::Authenticate() {
  int n = 0;
  agent_id_ = OneHeader(*ctx_, "agentid", &n);
  if (n != 1 || agent_id_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("expected exactly one agentid header, got ", n));
  }
  const std::string ids = OneHeader(*ctx_, "agentidentifiers", &n);
  if (n > 1) {
    return absl::InvalidArgumentError("expected at most one agentidentifiers header");
  }
  identifiers_ = ParseAgentIdentifiers(ids);
  // Only an agent that announced a window gets ours, and with it credits; an upstream agent
  // sends no such header.
  const std::string window = OneHeader(*ctx_, wire::kWindowHeader, &n);
  if (options_.window > 0 && n == 1) {
    peer_window_ = wire::ParseWindow(window);
  }
  if (options_.tokens != nullptr) {
    const std::string auth = OneHeader(*ctx_, "authorization", &n);
    if (n != 1 || !options_.tokens->Allows(auth, agent_id_)) {
      return absl::UnauthenticatedError(
          absl::StrCat("agent ", agent_id_, ": missing or invalid bearer token"));
    }
  }
  return absl::OkStatus();
}

void AgentStream::OnReadDone(bool ok) {
  if (!ok) {
    FinishOnce(grpc::Status::OK);
    return;
  }
  if (in_.type() != SLUICE_CREDIT) {  // upstream's metric keeps upstream's packet types
    metrics_.packets.WithLabels({"from_agent", wire::TypeLabel(in_.type())}).Inc();
  }
  if (absl::Status st = wire::Validate(in_); !st.ok()) {
    // Per frame (counted in bad_packets): above -v 4, the tunnel binaries' default.
    VLOG(5) << "agent " << agent_id_ << ": dropped " << st.message();
    metrics_.bad_packets.WithLabels({"invalid"}).Inc();
    ReadNext();
    return;
  }
  const int type = in_.type();
  if (!router_.OnAgentPacket(this, std::move(in_))) {
    metrics_.bad_packets.WithLabels({"unexpected_type"}).Inc();
    VLOG(5) << "agent " << agent_id_ << ": ignored " << wire::TypeName(type);
  }
  in_.Clear();
  ReadNext();
}

}  // namespace

absl::StatusOr<TokenFile> TokenFile::Load(const std::string& path) {
  TokenFile tf;
  auto content = base::ReadFile(path, 1 << 20);
  if (!content.ok()) {
    return content.status();
  }
  for (absl::string_view line : absl::StrSplit(*content, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') {
      continue;
    }
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(',', 1));
    tf.tokens_[kv.first] = kv.second;
  }
  if (tf.tokens_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": no tokens"));
  }
  return tf;
}

bool TokenFile::Allows(const std::string& authorization, const std::string& agent_id) const {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ")) {
    return false;
  }
  auto it = tokens_.find(std::string(token));
  return it != tokens_.end() && (it->second.empty() || it->second == agent_id);
}

grpc::ServerBidiReactor<wire::Packet, wire::Packet>* AgentService::Connect(
    grpc::CallbackServerContext* context) {
  return new AgentStream(context, options_, router_, metrics_);
}

}  // namespace sluice::tunnel::server
