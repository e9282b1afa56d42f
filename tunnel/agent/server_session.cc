// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/server_session.h"

#include "lib/base/log.h"

namespace sluice::tunnel::agent {

ServerSession::ServerSession(event::EventLoop& loop, Resolver& resolver, AgentMetrics& metrics,
                             const DialPolicy& policy, std::shared_ptr<StreamOutbox> outbox,
                             std::shared_ptr<wire::ReadGate> gate)
    : loop_(loop),
      resolver_(resolver),
      metrics_(metrics),
      policy_(policy),
      outbox_(std::move(outbox)),
      gate_(std::move(gate)) {}

ServerSession::~ServerSession() = default;

void ServerSession::Negotiated(int64_t peer_window) {
  loop_.Post([self = shared_from_this(), peer_window] { self->peer_window_ = peer_window; });
}

void ServerSession::Post(wire::Packet packet) {
  loop_.Post(
      [self = shared_from_this(), p = std::move(packet)]() mutable { self->Handle(std::move(p)); });
}

void ServerSession::Teardown() {
  torn_down_ = true;
  while (!conns_.empty()) {
    Retire(conns_.begin()->first);
  }
  dialing_.clear();
}

void ServerSession::Handle(wire::Packet p) {
  if (torn_down_) {
    return;
  }
  if (absl::Status st = wire::Validate(p); !st.ok()) {
    metrics_.bad_packets.WithLabels({"invalid"}).Inc();
    // Per frame (counted in bad_packets): above -v 4, the tunnel binaries' default.
    VLOG(5) << "from server: dropped " << st.message();
    return;
  }
  switch (p.type()) {
    case DIAL_REQ:
      HandleDial(p);
      break;
    case DATA:
      HandleData(std::move(p));
      break;
    case CLOSE_REQ:
      HandleClose(p.closerequest().connectid());
      break;
    case DIAL_CLS:
      HandleCloseDial(p.closedial().random());
      break;
    case SLUICE_CREDIT:
      if (peer_window_ > 0) {
        HandleCredit(p);
        break;
      }
      [[fallthrough]];  // not negotiated: a type this stream does not carry
    default:
      metrics_.bad_packets.WithLabels({"unexpected_type"}).Inc();
      VLOG(5) << "from server: ignored " << wire::TypeName(p.type());
  }
}

void ServerSession::HandleDial(const wire::Packet& p) {
  const auto& req = p.dialrequest();
  if (dialing_.contains(req.random())) {
    (void)outbox_->Send(wire::MakeDialResponse(req.random(), 0, "dial id already in use"));
    return;
  }
  if (req.protocol() != "tcp" && !req.protocol().empty()) {
    (void)outbox_->Send(wire::MakeDialResponse(
        req.random(), 0, "dial " + req.protocol() + " " + req.address() + ": unknown network"));
    return;
  }
  const int64_t id = next_id_++;
  auto conn = std::make_shared<BackendConn>(loop_, resolver_, *this, policy_, id, req.random());
  if (peer_window_ > 0) {
    conn->EnableWindow(peer_window_, wire::WindowFor(policy_.max_queued));
  }
  conns_[id] = conn;
  dialing_[req.random()] = id;
  conn->Dial(req.address(), conn);
}

void ServerSession::OnDialDone(BackendConn& conn, const std::string& error) {
  dialing_.erase(conn.random());
  if (!error.empty()) {
    // Upstream's two reasons: a net.Error timeout, and everything else.
    metrics_.dial_failures
        .WithLabels({error.find("timeout") != std::string::npos ? "timeout" : "unknown"})
        .Inc();
    VLOG(1) << "dial failed: " << error;
    (void)outbox_->Send(wire::MakeDialResponse(conn.random(), 0, error));
    Retire(conn.connect_id());
    return;
  }
  // Upstream observes successful dials only.
  metrics_.dial_duration.Observe(absl::ToDoubleSeconds(loop_.MonotonicNow() - conn.started()));
  metrics_.open_endpoint_connections.Add(1);
  (void)outbox_->Send(wire::MakeDialResponse(conn.random(), conn.connect_id(), ""));
}

void ServerSession::OnBackendData(BackendConn& conn, std::string bytes) {
  const size_t n = bytes.size();
  const int64_t id = conn.connect_id();
  conn.Charge(n);
  event::EventLoop* loop = &loop_;
  std::weak_ptr<ServerSession> weak = weak_from_this();
  (void)outbox_->Send(wire::MakeData(id, std::move(bytes)), [loop, weak, id, n] {
    loop->Post([weak, id, n] {
      auto self = weak.lock();
      if (!self) {
        return;
      }
      if (auto it = self->conns_.find(id); it != self->conns_.end()) {
        it->second->Credit(n);
      }
    });
  });
}

void ServerSession::OnBackendDone(BackendConn& conn, absl::Status reason) {
  VLOG(2) << "connection " << conn.connect_id() << " done: " << reason;
  (void)outbox_->Send(wire::MakeCloseResponse(conn.connect_id(), ""));
  Retire(conn.connect_id());
}

void ServerSession::OnBackendStalled(BackendConn& conn) {
  metrics_.stall_closes.Inc();
  (void)outbox_->Send(wire::MakeCloseResponse(conn.connect_id(), "backend stopped reading"));
  Retire(conn.connect_id());
}

void ServerSession::OnBackendCredit(BackendConn& conn, int64_t bytes) {
  (void)outbox_->Send(wire::MakeCredit(conn.connect_id(), bytes));
}

void ServerSession::HandleCredit(const wire::Packet& p) {
  // A connection closed meanwhile has no use for it: credits cross CLOSE packets.
  if (auto it = conns_.find(p.credit().connectid()); it != conns_.end()) {
    it->second->Grant(p.credit().bytes());
  }
}

void ServerSession::HandleData(wire::Packet p) {
  const int64_t id = p.data().connectid();
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second->open()) {
    metrics_.bad_packets.WithLabels({"unknown_connect_id"}).Inc();
    (void)outbox_->Send(wire::MakeCloseResponse(id, "unknown connectID"));
    return;
  }
  // Windowed, the server sends no more than we granted: the queue is bounded without holding
  // the stream, so a backend that reads nothing stalls nobody else.
  if (!it->second->Write(std::move(*p.mutable_data()->mutable_data()),
                         peer_window_ > 0 ? nullptr : gate_)) {
    // The backend does not read: close this connection only, so that one stuck backend never
    // blocks the stream the others share.
    metrics_.overflow_closes.Inc();
    (void)outbox_->Send(wire::MakeCloseResponse(id, "backend write queue overflow"));
    Retire(id);
  }
}

void ServerSession::HandleClose(int64_t id) {
  auto it = conns_.find(id);
  // A connection still dialing has not been given out (its DIAL_RSP is pending), so the server
  // cannot name it; upstream's agent knows a connection only once dialled. Answering a clean
  // CLOSE_RSP and dropping the dial left that dial unanswered for ever.
  if (it == conns_.end() || !it->second->connected()) {
    (void)outbox_->Send(wire::MakeCloseResponse(id, "unknown connectID"));
    return;
  }
  it->second->Close();  // flushes, then OnBackendDone answers CLOSE_RSP
}

void ServerSession::HandleCloseDial(int64_t random) {
  auto it = dialing_.find(random);
  if (it == dialing_.end()) {
    return;
  }
  const int64_t id = it->second;
  dialing_.erase(it);
  Retire(id);
}

void ServerSession::Retire(int64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) {
    return;
  }
  std::shared_ptr<BackendConn> conn = std::move(it->second);
  conns_.erase(it);
  // It lives until a later loop turn and may still finish its dial (a connect that completed
  // before DIAL_CLS was handled) or read: the server has been told, or cancelled it, so none of
  // that may reach it (no DIAL_RSP after DIAL_CLS, no DATA after CLOSE_RSP).
  conn->Abandon();
  if (conn->connected()) {
    metrics_.open_endpoint_connections.Add(-1);
  }
  loop_.Post([conn = std::move(conn)] {});  // destroyed on a later turn, outside its callbacks
}

}  // namespace sluice::tunnel::agent
