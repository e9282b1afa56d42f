// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/connect_session.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/log.h"

#include "tunnel/wire/packet.h"

namespace sluice::tunnel::server {

ConnectHead ParseConnectHead(const std::string& head) {
  const size_t eol = head.find("\r\n");
  const std::string line = head.substr(0, eol);
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[0].empty()) {
    return {400, ""};
  }
  if (parts[0] != "CONNECT") {
    return {405, ""};
  }
  // The destination is the request-target authority, never the Host header. One without a
  // port goes to the agent as it is, as upstream forwards it: the agent's dial fails with Go's
  // "missing port in address".
  const std::string& target = parts[1];
  const size_t colon = target.rfind(':');
  if (target.empty() || colon == 0 || (colon != std::string::npos && colon + 1 == target.size()) ||
      target.find('/') != std::string::npos) {
    return {400, ""};
  }
  return {0, target};
}

std::string ConnectErrorReply(const std::string& err) {
  int code = 502;
  std::string reason = "Bad Gateway";
  std::string body = err;
  if (err == "No agent available") {
    code = 500;
    reason = "Internal Server Error";
    body = "currently no tunnels available: " + err;
  } else if (absl::StrContains(err, "timeout") || absl::StrContains(err, "deadline exceeded")) {
    code = 504;
    reason = "Gateway Timeout";
  } else if (absl::StrContains(err, "too many open files") || err == Router::kShuttingDown ||
             err == Router::kAgentsFull) {
    code = 503;
    reason = "Service Unavailable";
  } else if (err == Router::kTooManyDials || err == Router::kTooManyTunnels) {
    code = 429;
    reason = "Too Many Requests";
  }
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

namespace {
constexpr char kEstablished[] = "HTTP/1.1 200 Connection Established\r\n\r\n";

std::string Plain(int code, const char* reason, const std::string& body = "") {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      body.empty() ? "" : "\r\nContent-Type: text/plain; charset=utf-8",
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}
}  // namespace

absl::StatusOr<std::shared_ptr<ConnectSession>> ConnectSession::Create(
    event::EventLoop& loop, base::UniqueFd fd, Owner& owner, Router& router, ServerMetrics& metrics,
    const HttpConnectOptions& options, int64_t random, std::string client) {
  auto s = std::shared_ptr<ConnectSession>(
      new ConnectSession(loop, owner, router, metrics, options, random, std::move(client)));
  std::unique_ptr<wire::TlsConn> tls;
  if (options.tls != nullptr) {
    auto accepted = wire::TlsConn::Accept(*options.tls, fd.get());
    if (!accepted.ok()) {
      return accepted.status();
    }
    tls = std::move(*accepted);
  }
  auto pump = wire::SocketPump::Create(loop, std::move(fd), *s, options.max_queued, std::move(tls));
  if (!pump.ok()) {
    return pump.status();
  }
  s->pump_ = std::move(*pump);
  s->deadline_timer_->Arm(options.header_timeout);
  return s;
}

ConnectSession::ConnectSession(event::EventLoop& loop, Owner& owner, Router& router,
                               ServerMetrics& metrics, const HttpConnectOptions& options,
                               int64_t random, std::string client)
    : loop_(loop),
      owner_(owner),
      router_(router),
      metrics_(metrics),
      options_(options),
      random_(random),
      client_(std::move(client)),
      // Owned by the session, so plain `this`: it is destroyed later, on a loop turn of its own
      // (Owner::OnSessionDone), never inside these callbacks.
      deadline_timer_(loop.CreateTimer([this] { OnDeadline(); })),
      stall_(loop, options.stall_timeout, [this] { CheckStall(); }) {
  metrics_.http_connections.Add(1);
}

ConnectSession::~ConnectSession() {
  if (options_.budget != nullptr) {
    options_.budget->Release(pump_charged_);
  }
  metrics_.http_connections.Add(-1);
}

void ConnectSession::SyncBudget() {
  if (options_.budget == nullptr) {
    return;
  }
  const size_t now = pump_ != nullptr ? pump_->queued() : 0;
  if (now > pump_charged_) {
    options_.budget->Charge(now - pump_charged_);
  } else {
    options_.budget->Release(pump_charged_ - now);
  }
  pump_charged_ = now;
}

void ConnectSession::OnDeadline() {
  if (state_ == State::kHead) {
    metrics_.limited.WithLabels({"header_timeout"}).Inc();
    Reply(Plain(408, "Request Timeout"));
  } else {
    End();  // armed by Reply: the reply was not taken within the timeout
  }
}

void ConnectSession::Shutdown() {
  ReleaseAgent();
  router_.RemoveFrontend(this);
  state_ = State::kDone;
  pump_.reset();
}

bool ConnectSession::Deliver(wire::Packet p, const std::shared_ptr<wire::ReadGate>& gate) {
  std::weak_ptr<ConnectSession> weak = weak_from_this();
  if (p.type() == DATA) {
    const size_t n = p.data().data().size();
    // Bytes posted but not yet handed to the socket measure this loop's lag, not the client's
    // reading speed (that is the pump's bound, enforced in OnAgentData), so the backstop here
    // is looser: a busy loop must not cut healthy transfers.
    if (posted_bytes_.load() + n > 4 * options_.max_queued) {
      return false;
    }
    // The loop's backlog counts too: holding the agent stream is the only brake we have.
    posted_bytes_ += n;
    wire::ByteBudget* budget = options_.budget;
    if (budget != nullptr) {
      budget->Charge(n);
    }
    const bool spent = budget != nullptr && budget->spent();
    if (gate != nullptr && (spent || posted_bytes_.load() > options_.max_queued / 4)) {
      if (spent) {
        metrics_.limited.WithLabels({"byte_budget"}).Inc();
      }
      HoldAgent(gate);
    }
    loop_.Post(
        [weak, gate, budget, bytes = std::move(*p.mutable_data()->mutable_data())]() mutable {
          if (budget != nullptr) {
            budget->Release(bytes.size());  // the pump's queue is charged in OnAgentData
          }
          if (auto self = weak.lock()) {
            self->posted_bytes_ -= bytes.size();
            self->OnAgentData(std::move(bytes), gate);
          }
        });
    return true;
  }
  loop_.Post([weak, p = std::move(p)] {
    auto self = weak.lock();
    if (!self) {
      return;
    }
    if (p.type() == DIAL_RSP) {
      self->OnDialResponse(p);
    } else if (p.type() == CLOSE_RSP && self->state_ == State::kEstablished) {
      self->state_ = State::kClosing;
      self->pump_->CloseAfterFlush();
    }
  });
  return true;
}

void ConnectSession::OnPeerWindow(int64_t peer_window) {
  // Posted ahead of the DIAL_RSP that Deliver posts next.
  loop_.Post([weak = weak_from_this(), peer_window] {
    if (auto self = weak.lock()) {
      self->window_.SetPeerWindow(peer_window);
      self->credits_ =
          std::make_unique<wire::CreditReturn>(wire::WindowFor(self->options_.max_queued));
    }
  });
}

void ConnectSession::OnCredit(int64_t bytes) {
  loop_.Post([weak = weak_from_this(), bytes] {
    auto self = weak.lock();
    if (self && self->window_.Grant(bytes) && self->state_ == State::kEstablished) {
      self->pump_->SetReading(true);
    }
  });
}

void ConnectSession::Abort(const std::string& why) {
  loop_.Post([weak = weak_from_this(), why] {
    if (auto self = weak.lock()) {
      VLOG(1) << "http-connect: " << why;
      self->End();
    }
  });
}

void ConnectSession::OnSocketData(std::string bytes) {
  switch (state_) {
    case State::kHead:
      OnHeadBytes(bytes);
      break;
    case State::kEstablished:
      SendUpstream(std::move(bytes));
      break;
    default:
      break;  // reading is off while dialing; late bytes while closing are dropped
  }
}

void ConnectSession::OnHeadBytes(const std::string& bytes) {
  head_ += bytes;
  const size_t end = head_.find("\r\n\r\n");
  if (end == std::string::npos) {
    if (head_.size() > options_.max_header_bytes) {
      metrics_.limited.WithLabels({"header_bytes"}).Inc();
      Reply(Plain(431, "Request Header Fields Too Large"));
    }
    return;
  }
  if (end > options_.max_header_bytes) {
    metrics_.limited.WithLabels({"header_bytes"}).Inc();
    Reply(Plain(431, "Request Header Fields Too Large"));
    return;
  }
  ConnectHead parsed = ParseConnectHead(head_.substr(0, end + 2));
  if (parsed.status != 0) {
    // Upstream's texts: its handler's http.Error, and Go's server for a malformed request.
    Reply(parsed.status == 405
              ? Plain(405, "Method Not Allowed", "this proxy only supports CONNECT passthrough\n")
              : Plain(400, "Bad Request", "400 Bad Request"));
    return;
  }
  head_.erase(0, end + 4);  // keep bytes the client sent after the head
  state_ = State::kDialing;
  deadline_timer_->Disarm();  // the head arrived in time; Reply re-arms it
  pump_->SetReading(false);
  const std::string err =
      router_.Dial(this, wire::MakeDialRequest(parsed.authority, random_), client_);
  if (!err.empty()) {
    Reply(ConnectErrorReply(err));
  }
}

void ConnectSession::OnDialResponse(const wire::Packet& p) {
  if (state_ != State::kDialing) {
    return;
  }
  if (!p.dialresponse().error().empty()) {
    Reply(ConnectErrorReply(p.dialresponse().error()));
    return;
  }
  connect_id_ = p.dialresponse().connectid();
  state_ = State::kEstablished;
  reply_unwritten_ = sizeof(kEstablished) - 1;
  (void)pump_->Write(kEstablished);
  if (!head_.empty()) {
    SendUpstream(std::move(head_));
    head_.clear();
  }
  pump_->SetReading(window_.open());
}

void ConnectSession::OnAgentData(std::string bytes, const std::shared_ptr<wire::ReadGate>& gate) {
  if (state_ != State::kEstablished) {
    return;
  }
  const base::MonoTime start = loop_.clock().MonotonicNow();
  const bool written = pump_->Write(std::move(bytes));
  // Upstream times each write to the frontend's connection.
  metrics_.frontend_write_duration.Observe(
      absl::ToDoubleSeconds(loop_.clock().MonotonicNow() - start));
  if (!written) {
    metrics_.overflow_closes.Inc();
    VLOG(1) << "http-connect: client queue overflow";
    End();  // the client does not read fast enough: close this connection only
    return;
  }
  SyncBudget();
  if (gate != nullptr && pump_->queued() > options_.max_queued / 4) {
    HoldAgent(gate);
  }
}

// The client (or this loop) lags: hold the agent stream (see wire::ReadGate) until we drain,
// unless we let go of it for a stall and the client has taken nothing since.
void ConnectSession::HoldAgent(const std::shared_ptr<wire::ReadGate>& gate) {
  {
    absl::MutexLock lock(&hold_mu_);
    if (hold_.held() || stalled_) {
      return;
    }
    hold_.Take(gate);
  }
  loop_.Post([weak = weak_from_this()] {
    if (auto self = weak.lock()) {
      self->stall_.Start();
      if (self->state_ == State::kEstablished) {
        self->CheckStall();
      }
    }
  });
}

void ConnectSession::ReleaseAgent() {
  absl::MutexLock lock(&hold_mu_);
  hold_.Release();
}

// Loop thread, from a hold until the client drains: a client that took nothing for
// kStallGrace lets go of the agent stream (its bytes keep queueing up to --max-connection-
// buffer); one that took nothing for the stall timeout is cut.
void ConnectSession::CheckStall() {
  if (state_ != State::kEstablished) {
    return;
  }
  bool held;
  {
    absl::MutexLock lock(&hold_mu_);
    held = hold_.held();
  }
  const bool queued = pump_->queued() > 0;
  if (!held && !queued) {
    return;  // drained since: the watch ends
  }
  // Nothing queued toward the client: it is the loop's backlog that holds, not a stall.
  switch (stall_.Check(queued ? pump_->last_write() : loop_.MonotonicNow(), held)) {
    case wire::StallWatch::Verdict::kWait:
      break;
    case wire::StallWatch::Verdict::kRelease: {
      VLOG(1) << "http-connect: connection " << connect_id_ << " (" << client_
              << "): client took nothing for " << wire::ReadGate::kStallGrace
              << "; the agent stream moves on without it";
      absl::MutexLock lock(&hold_mu_);
      stalled_ = true;
      hold_.Release();
      break;
    }
    case wire::StallWatch::Verdict::kCut:
      metrics_.stall_closes.Inc();
      LOG(WARNING) << "http-connect: connection " << connect_id_ << " (" << client_
                   << "): client took nothing for " << stall_.timeout() << " with "
                   << pump_->queued() << " bytes queued; closing it (--stall-timeout)";
      End();
      break;
  }
}

void ConnectSession::OnSocketWritten(size_t n) {
  {
    absl::MutexLock lock(&hold_mu_);
    stalled_ = false;  // the client reads again: it may pace the stream again
  }
  const size_t ours = std::min(n, reply_unwritten_);
  reply_unwritten_ -= ours;
  if (credits_ == nullptr || state_ != State::kEstablished || n == ours) {
    return;
  }
  if (const int64_t grant = credits_->Consumed(n - ours, pump_->queued() == 0); grant > 0) {
    router_.Credit(this, connect_id_, grant);
  }
}

void ConnectSession::OnSocketDrained() {
  SyncBudget();
  if (posted_bytes_.load() <= options_.max_queued / 8) {
    ReleaseAgent();
    stall_.Stop();
  }
}

void ConnectSession::SendUpstream(std::string bytes) {
  const size_t n = bytes.size();
  const bool pause = window_.Charge(n);
  event::EventLoop* loop = &loop_;
  std::weak_ptr<ConnectSession> weak = weak_from_this();
  const bool ok =
      router_.SendData(this, wire::MakeData(connect_id_, std::move(bytes)), [loop, weak, n] {
        loop->Post([weak, n] {
          if (auto self = weak.lock()) {
            self->OnSent(n);
          }
        });
      });
  if (!ok) {
    VLOG(1) << "http-connect: tunnel gone while sending upstream";
    End();
    return;
  }
  if (pause) {
    pump_->SetReading(false);
  }
}

void ConnectSession::OnSent(size_t n) {
  if (window_.Credit(n) && state_ == State::kEstablished) {
    pump_->SetReading(true);
  }
}

void ConnectSession::Reply(const std::string& bytes) {
  state_ = State::kClosing;
  (void)pump_->Write(bytes);
  pump_->CloseAfterFlush();
  // A client that never reads its reply, or never finished the TLS handshake the reply waits
  // for (a slowloris), does not hold the session longer than the head could take.
  deadline_timer_->Arm(options_.header_timeout);
}

void ConnectSession::OnSocketDone(absl::Status reason) {
  VLOG(2) << "http-connect client done: " << reason;
  End();
}

void ConnectSession::End() {
  if (state_ == State::kDone) {
    return;
  }
  state_ = State::kDone;
  ReleaseAgent();
  router_.RemoveFrontend(this);
  owner_.OnSessionDone(this);
}

}  // namespace sluice::tunnel::server
