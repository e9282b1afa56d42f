// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/proxy_service.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"

#include "tunnel/wire/outbox.h"
#include "tunnel/wire/read_gate.h"
#include "tunnel/wire/stall_watch.h"

namespace sluice::tunnel::server {
namespace {

using Reactor = grpc::ServerBidiReactor<wire::Packet, wire::Packet>;

// One frontend stream. Owns itself: deleted in OnDone. Reactions run on gRPC threads;
// Deliver/Abort on whichever thread the Router runs.
class ProxyStream final : public Reactor, public Frontend {
 public:
  ProxyStream(Router& router, ServerMetrics& metrics, event::EventLoop& loop, size_t max_queued,
              wire::ByteBudget* budget, absl::Duration stall_timeout, std::string client)
      : router_(router),
        metrics_(metrics),
        loop_(loop),
        max_queued_(max_queued),
        budget_(budget),
        stall_timeout_(stall_timeout),
        client_(std::move(client)),
        outbox_(
            [this](const wire::Packet* p) {
              writing_type_.store(p->type(), std::memory_order_relaxed);
              write_started_.store(absl::ToInt64Nanoseconds(base::MonotonicNow().SinceOrigin()),
                                   std::memory_order_relaxed);
              StartWrite(p);
            },
            budget) {
    metrics_.grpc_connections.WithLabels({"Proxy"}).Add(1);
    StartRead(&in_);
  }

  // Frontend
  bool Deliver(wire::Packet p, const std::shared_ptr<wire::ReadGate>& gate) override {
    const size_t queued = outbox_.queued_bytes() + wire::PacketBytes(p);
    if (queued > max_queued_) {
      return false;
    }
    metrics_.packets.WithLabels({"to_client", wire::TypeLabel(p.type())}).Inc();
    absl::AnyInvocable<void()> on_written;
    if (p.type() == DATA) {
      connect_id_.store(p.data().connectid(), std::memory_order_relaxed);
      if (windowed_.load(std::memory_order_relaxed)) {
        // Granted back to the agent once gRPC took it toward our client.
        on_written = [this, id = p.data().connectid(), n = p.data().data().size()] {
          Consumed(id, n);
        };
      }
    }
    (void)outbox_.Send(std::move(p), std::move(on_written));  // a closed stream drops it
    if (gate != nullptr && (queued > max_queued_ / 4 || BudgetSpent())) {
      HoldAgent(gate);
    }
    return true;
  }
  void OnPeerWindow(int64_t peer_window) override {
    absl::MutexLock lock(&credit_->mu);
    credit_->sent.SetPeerWindow(peer_window);
    credit_->returns = std::make_unique<wire::CreditReturn>(wire::WindowFor(max_queued_));
    windowed_.store(true, std::memory_order_relaxed);
  }
  void OnCredit(int64_t bytes) override {
    absl::MutexLock lock(&credit_->mu);
    if (credit_->sent.Grant(bytes)) {
      credit_->window.Release();  // starts the parked read, unless finished
    }
  }
  bool Finished() const override { return credit_->reads->closed(); }
  void Abort(const std::string& why) override {
    // Called under the Router's lock: finish from the loop so no reaction can run inline.
    // The closure holds the Credit, not the reactor, which may be gone by then.
    loop_.Post([credit = credit_, why] {
      FinishOnce(*credit, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why));
    });
  }

  // grpc::ServerBidiReactor
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override {
    // Read before the Outbox starts the next write. Upstream times each Send to the frontend.
    metrics_.frontend_write_duration.Observe(absl::ToDoubleSeconds(
        base::MonotonicNow() - base::MonoTime::FromSinceOrigin(absl::Nanoseconds(
                                   write_started_.load(std::memory_order_relaxed)))));
    if (!ok) {
      metrics_.StreamError("to_client", grpc::StatusCode::CANCELLED,
                           wire::TypeLabel(writing_type_.load(std::memory_order_relaxed)));
    }
    (void)outbox_.OnWriteDone(ok);
    const bool drained = outbox_.queued_bytes() < max_queued_ / 8;
    absl::MutexLock lock(&credit_->mu);
    credit_->last_write = loop_.clock().MonotonicNow();
    credit_->stalled = false;  // the client reads again: it may pace the agent stream again
    if (drained) {
      credit_->hold.Release();  // the agent stream may read again
      credit_->watching = false;
    }
  }
  // A parked read would otherwise keep a cancelled stream from ever reaching OnDone.
  void OnCancel() override {
    metrics_.StreamError("from_client", grpc::StatusCode::CANCELLED);  // Recv's error upstream
    FinishOnce(*credit_, grpc::Status::CANCELLED);
  }
  void OnDone() override {
    router_.RemoveFrontend(this);
    metrics_.grpc_connections.WithLabels({"Proxy"}).Add(-1);
    delete this;
  }

 private:
  // Shared with write hooks and deferred tasks, which reach the reactor only through the one
  // Finish claim (ClaimFinish), so nothing touches it after Finish.
  struct Credit {
    Credit(event::EventLoop& l, ProxyStream* s, absl::Duration timeout)
        : loop(l),
          self(s),
          stall_timeout(timeout),
          reads(std::make_shared<wire::ReadGate>([s] { s->StartRead(&s->in_); })) {}
    // The last reference may drop on a gRPC thread; the watch belongs to the loop's.
    ~Credit() {
      if (stall != nullptr) {
        loop.Post([s = std::move(stall)] {});
      }
    }
    event::EventLoop& loop;
    ProxyStream* const self;  // alive until the claimant calls Finish
    const absl::Duration stall_timeout;
    std::unique_ptr<wire::StallWatch> stall;  // loop thread; made by the first CheckStall
    // This stream's reads: held by its own send window, closed by the Finish claim.
    const std::shared_ptr<wire::ReadGate> reads;
    absl::Mutex mu;
    wire::SendWindow sent ABSL_GUARDED_BY(mu);  // toward the agent stream
    wire::GateHold window ABSL_GUARDED_BY(mu);  // on `reads` while `sent` is past the window
    wire::GateHold hold ABSL_GUARDED_BY(mu);    // on the agent stream while we are congested
    bool watching ABSL_GUARDED_BY(mu) = false;  // from a hold until we drain
    // Let go of the agent stream for a stall: no hold until the client takes bytes again.
    bool stalled ABSL_GUARDED_BY(mu) = false;
    std::unique_ptr<wire::CreditReturn> returns ABSL_GUARDED_BY(mu);  // windowed agents only
    // Last write gRPC completed toward the client, on the loop's monotonic clock.
    base::MonoTime last_write ABSL_GUARDED_BY(mu);
  };
  void HoldAgent(const std::shared_ptr<wire::ReadGate>& gate);
  // The server-wide byte budget is spent (counted): pause what feeds us until we wrote.
  bool BudgetSpent() {
    if (budget_ == nullptr || !budget_->spent()) {
      return false;
    }
    metrics_.limited.WithLabels({"byte_budget"}).Inc();
    return true;
  }
  static void CheckStall(const std::shared_ptr<Credit>& credit);
  // Windowed: gRPC took `n` bytes of connection `id` toward our client.
  void Consumed(int64_t id, size_t n);
  static void Release(const std::shared_ptr<Credit>& credit, size_t n);

  // The one Finish claim (ReadGate::Close, as AgentStream's): true for the first caller only,
  // and no read starts after it. The reactor cannot be deleted before its claimant calls
  // Finish (OnDone needs one), so the claimant may still use `c.self`.
  static bool ClaimFinish(Credit& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    if (!c.reads->Close()) {
      return false;
    }
    c.hold.Release();
    return true;
  }
  static void FinishOnce(Credit& c, grpc::Status status) {
    {
      absl::MutexLock lock(&c.mu);
      if (!ClaimFinish(c)) {
        return;
      }
    }
    c.self->outbox_.Close();
    c.self->Finish(std::move(status));
  }

  void Dispatch();
  void HandleData();
  void ReadNext();

  Router& router_;
  ServerMetrics& metrics_;
  event::EventLoop& loop_;
  const size_t max_queued_;
  wire::ByteBudget* const budget_;  // may be null
  const absl::Duration stall_timeout_;
  const std::string client_;  // ClientOf(peer), for the pending-dial limit
  std::atomic<int64_t> connect_id_{0};
  std::atomic<bool> windowed_{false};  // the agent announced a window (OnPeerWindow)
  // The write in flight (one at a time): its type and start, for the metrics.
  std::atomic<int> writing_type_{0};
  std::atomic<int64_t> write_started_{0};  // monotonic nanoseconds
  wire::Outbox outbox_;
  wire::Packet in_;
  std::shared_ptr<Credit> credit_ = std::make_shared<Credit>(loop_, this, stall_timeout_);
};

// Our client reads slower than an agent without the window extension sends: slow the agent
// stream down (hold its reads) instead of queueing without bound. A client that took nothing
// for kStallGrace is paused, not slow: let go of the agent stream so the others on it move
// again, and cut it only after the stall timeout (wire::StallWatch).
void ProxyStream::HoldAgent(const std::shared_ptr<wire::ReadGate>& gate) {
  {
    absl::MutexLock lock(&credit_->mu);
    if (credit_->hold.held() || credit_->stalled || credit_->reads->closed()) {
      return;
    }
    credit_->hold.Take(gate);
    credit_->watching = true;
    credit_->last_write = loop_.clock().MonotonicNow();  // the grace counts from the hold
  }
  loop_.Post([credit = credit_] { CheckStall(credit); });
}

// Loop thread, from a hold until we drain.
void ProxyStream::CheckStall(const std::shared_ptr<Credit>& credit) {
  if (credit->stall == nullptr) {
    // Weak: the watch lives inside the Credit. A check that drops the last reference frees the
    // watch through ~Credit's Post, not inside its own timer callback.
    credit->stall = std::make_unique<wire::StallWatch>(credit->loop, credit->stall_timeout,
                                                       [weak = std::weak_ptr<Credit>(credit)] {
                                                         if (auto c = weak.lock()) {
                                                           CheckStall(c);
                                                         }
                                                       });
  }
  ProxyStream* self = nullptr;
  {
    absl::MutexLock lock(&credit->mu);
    if (!credit->watching || credit->reads->closed()) {
      return;  // drained, or finished
    }
    // A fresh reading: last_write is stamped on gRPC threads, not by this loop's iterations.
    switch (credit->stall->Check(credit->last_write, credit->hold.held(),
                                 credit->loop.clock().MonotonicNow())) {
      case wire::StallWatch::Verdict::kWait:
        return;
      case wire::StallWatch::Verdict::kRelease:
        VLOG(1) << "frontend " << credit->self->client_ << ": connection "
                << credit->self->connect_id_.load() << " took nothing for "
                << wire::ReadGate::kStallGrace << "; the agent stream moves on without it";
        credit->stalled = true;
        credit->hold.Release();
        return;
      case wire::StallWatch::Verdict::kCut:
        if (!ClaimFinish(*credit)) {
          return;
        }
        self = credit->self;
        break;
    }
  }
  self->metrics_.stall_closes.Inc();
  LOG(WARNING) << "frontend " << self->client_ << ": connection " << self->connect_id_.load()
               << " read nothing for " << credit->stall_timeout << " with "
               << self->outbox_.queued_bytes() << " bytes queued; closing it (--stall-timeout)";
  self->outbox_.Close();
  self->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "stalled reader: the client read nothing for --stall-timeout"));
}

void ProxyStream::Consumed(int64_t id, size_t n) {
  const bool drained = outbox_.queued_bytes() == 0;
  int64_t grant = 0;
  {
    absl::MutexLock lock(&credit_->mu);
    if (credit_->returns != nullptr) {
      grant = credit_->returns->Consumed(n, drained);
    }
  }
  if (grant > 0) {
    router_.Credit(this, id, grant);
  }
}

void ProxyStream::OnReadDone(bool ok) {
  if (!ok) {
    FinishOnce(*credit_, grpc::Status::OK);
    return;
  }
  metrics_.packets.WithLabels({"from_client", wire::TypeLabel(in_.type())}).Inc();
  if (absl::Status st = wire::Validate(in_); !st.ok()) {
    // Per frame (counted in bad_packets): above -v 4, the tunnel binaries' default.
    VLOG(5) << "frontend: dropped " << st.message();
    metrics_.bad_packets.WithLabels({"invalid"}).Inc();
    in_.Clear();
    ReadNext();
    return;
  }
  if (in_.type() == DATA) {
    HandleData();
    return;
  }
  Dispatch();
  in_.Clear();
  ReadNext();
}

void ProxyStream::Dispatch() {
  switch (in_.type()) {
    case DIAL_REQ: {
      const std::string err = router_.Dial(this, in_, client_);
      if (!err.empty()) {
        (void)outbox_.Send(wire::MakeDialResponse(in_.dialrequest().random(), 0, err));
      }
      break;
    }
    case CLOSE_REQ:
      if (!router_.Close(this, in_.closerequest().connectid())) {
        (void)outbox_.Send(
            wire::MakeCloseResponse(in_.closerequest().connectid(), "unknown connectID"));
      }
      break;
    case DIAL_CLS:
      router_.CancelDial(this, in_.closedial().random());
      break;
    default:
      metrics_.bad_packets.WithLabels({"unexpected_type"}).Inc();
      VLOG(5) << "frontend: ignored " << wire::TypeName(in_.type());
  }
}

void ProxyStream::HandleData() {
  const int64_t id = in_.data().connectid();
  const size_t n = in_.data().data().size();
  {
    absl::MutexLock lock(&credit_->mu);
    credit_->sent.Charge(n);  // ReadNext parks the next read if past the window
  }
  const bool sent =
      router_.SendData(this, std::move(in_), [credit = credit_, n] { Release(credit, n); });
  in_.Clear();
  if (!sent) {
    Release(credit_, n);
    // Upstream's reply to DATA before a successful dial.
    (void)outbox_.Send(wire::MakeCloseResponse(id, "backend not initialized"));
  }
  ReadNext();
}

// Per-connection flow control: stop reading this stream while its bytes wait for the agent
// stream, instead of queueing without bound (apiserver-network-proxy#180, #881).
void ProxyStream::ReadNext() {
  {
    absl::MutexLock lock(&credit_->mu);
    // Over the byte budget, bytes of ours in flight to the agent stream pause us too: their
    // completion (Release) resumes us, so the pause cannot outlive them.
    if (!credit_->sent.open() || (credit_->sent.in_flight() > 0 && BudgetSpent())) {
      credit_->window.Take(credit_->reads);
    }
  }
  credit_->reads->ReadNext();  // parks while the window (or nothing: finished) holds it
}

void ProxyStream::Release(const std::shared_ptr<Credit>& credit, size_t n) {
  absl::MutexLock lock(&credit->mu);
  if (credit->sent.Credit(n)) {
    credit->window.Release();  // starts the parked read, unless finished
  }
}

}  // namespace

grpc::ServerBidiReactor<wire::Packet, wire::Packet>* ProxyService::Proxy(
    grpc::CallbackServerContext* context) {
  return new ProxyStream(router_, metrics_, loop_, max_queued_, budget_, stall_timeout_,
                         ClientOf(context->peer()));
}

}  // namespace sluice::tunnel::server
