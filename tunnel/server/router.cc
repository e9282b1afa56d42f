// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"

namespace sluice::tunnel::server {
namespace {

// "host:port" or "[v6]:port" -> host without brackets.
std::string DialHost(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t end = address.find(']');
    return end == std::string::npos ? address : address.substr(1, end - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

std::string ClientOf(const std::string& peer) {
  std::string_view p = peer;
  if (p.starts_with("unix:") || p.empty()) {
    return "unix";
  }
  for (std::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (p.starts_with(scheme)) {
      p.remove_prefix(scheme.size());
    }
  }
  return DialHost(std::string(p));
}

absl::StatusOr<std::vector<Strategy>> ParseStrategies(const std::string& list) {
  std::vector<Strategy> out;
  for (absl::string_view s : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    if (s == "default") {
      out.push_back(Strategy::kDefault);
    } else if (s == "destHost") {
      out.push_back(Strategy::kDestHost);
    } else if (s == "defaultRoute") {
      out.push_back(Strategy::kDefaultRoute);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--proxy-strategies: unknown strategy \"", s,
                                                     "\" (want default, destHost, defaultRoute)"));
    }
  }
  if (out.empty()) {
    out.push_back(Strategy::kDefault);
  }
  return out;
}

Router::Router(std::vector<Strategy> strategies, ServerMetrics& metrics, RouterLimits limits)
    : strategies_(std::move(strategies)),
      metrics_(metrics),
      limits_(limits),
      rng_(std::random_device{}()) {}

absl::Status Router::AddAgent(AgentLink* agent) {
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CheckAgentLocked(agent); !st.ok()) {
    return st;
  }
  ++agent_streams_;
  agents_[agent->agent_id()].push_back(agent);
  Claim(agent, 1);
  UpdateGauges();
  return absl::OkStatus();
}

void Router::RemoveAgent(AgentLink* agent) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(agent->agent_id());
  if (it != agents_.end()) {
    const size_t erased = std::erase(it->second, agent);
    agent_streams_ -= erased;
    if (erased > 0) {
      Claim(agent, -1);
    }
    if (it->second.empty()) {
      agents_.erase(it);
    }
  }
  draining_.erase(agent);
  // Upstream leaves these dials hanging (apiserver-network-proxy#126); fail them now.
  for (auto p = pending_.lower_bound({agent, INT64_MIN});
       p != pending_.end() && p->first.first == agent;) {
    Frontend* f = p->second;
    const int64_t random = p->first.second;
    p = pending_.erase(p);
    Unpend(tunnels_[f]);  // a pending dial always has its tunnel
    DropTunnel(f);
    metrics_.dial_failures.WithLabels({"backend_close"}).Inc();  // upstream's nearest reason
    (void)f->Deliver(wire::MakeDialResponse(random, 0, "agent disconnected before dial response"),
                     nullptr);
  }
  for (auto e = established_.lower_bound({agent, INT64_MIN});
       e != established_.end() && e->first.first == agent;) {
    Frontend* f = e->second;
    const int64_t id = e->first.second;
    e = established_.erase(e);
    LogClosed(tunnels_[f], "agent disconnected");
    DropTunnel(f);
    (void)f->Deliver(wire::MakeCloseResponse(id, "agent disconnected"), nullptr);
  }
  UpdateGauges();
}

void Router::SetDraining(AgentLink* agent) {
  absl::MutexLock lock(&mu_);
  draining_.insert(agent);
}

AgentLink* Router::PickFrom(const std::vector<AgentLink*>& candidates, bool* full) {
  std::vector<AgentLink*> fresh;
  std::vector<AgentLink*> open;
  for (AgentLink* a : candidates) {
    if (limits_.max_tunnels_per_agent > 0 && tunnels_by_agent_.contains(a) &&
        tunnels_by_agent_.at(a) >= limits_.max_tunnels_per_agent) {
      *full = true;
      continue;
    }
    open.push_back(a);
    if (!draining_.contains(a)) {
      fresh.push_back(a);
    }
  }
  const auto& pool = fresh.empty() ? open : fresh;  // draining agents only as last resort
  if (pool.empty()) {
    return nullptr;
  }
  return pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng_)];
}

AgentLink* Router::Pick(const std::string& address, bool* full) {
  const std::string host = DialHost(address);
  for (Strategy s : strategies_) {
    std::vector<AgentLink*> candidates;
    for (const auto& [id, links] : agents_) {
      AgentLink* primary = links.front();
      const AgentIdentifiers& ids = primary->identifiers();
      if (s == Strategy::kDefault ||
          (s == Strategy::kDestHost &&
           std::find(ids.hosts.begin(), ids.hosts.end(), host) != ids.hosts.end()) ||
          (s == Strategy::kDefaultRoute && ids.default_route)) {
        candidates.push_back(primary);
      }
    }
    if (AgentLink* a = PickFrom(candidates, full)) {
      return a;
    }
  }
  return nullptr;
}

void Router::StopDialing() {
  absl::MutexLock lock(&mu_);
  stopped_dialing_ = true;
}

bool Router::stopped_dialing() const {
  absl::MutexLock lock(&mu_);
  return stopped_dialing_;
}

size_t Router::Tunnels() const {
  absl::MutexLock lock(&mu_);
  return tunnels_.size();
}

std::string Router::Dial(Frontend* frontend, const wire::Packet& dial, const std::string& client) {
  absl::MutexLock lock(&mu_);
  if (tunnels_.contains(frontend)) {
    metrics_.bad_packets.WithLabels({"second_dial"}).Inc();
    return "a dial was already made on this stream";
  }
  if (stopped_dialing_) {
    metrics_.dial_failures.WithLabels({"no_agent"}).Inc();  // none is offered while draining
    return kShuttingDown;
  }
  if (limits_.max_tunnels_per_client > 0 && tunnels_by_client_.contains(client) &&
      tunnels_by_client_.at(client) >= limits_.max_tunnels_per_client) {
    metrics_.limited.WithLabels({"tunnels_per_client"}).Inc();
    return kTooManyTunnels;
  }
  bool full = false;
  AgentLink* agent = Pick(dial.dialrequest().address(), &full);
  if (agent == nullptr && full) {
    metrics_.limited.WithLabels({"tunnels_per_agent"}).Inc();
    return kAgentsFull;
  }
  if (agent == nullptr) {
    metrics_.dial_failures.WithLabels({"no_agent"}).Inc();
    return "No agent available";
  }
  const Key key{agent, dial.dialrequest().random()};
  if (pending_.contains(key)) {
    return "dial id already in use";
  }
  size_t& client_pending = pending_by_client_[client];
  if (limits_.max_pending_dials_per_client > 0 &&
      client_pending >= limits_.max_pending_dials_per_client) {
    metrics_.limited.WithLabels({"pending_dials_per_client"}).Inc();
    return kTooManyDials;
  }
  ++client_pending;
  pending_[key] = frontend;
  AddTunnel(frontend, Tunnel{agent, key.second, 0, base::MonotonicNow(), client,
                             dial.dialrequest().address()});
  if (!agent->SendToAgent(dial, nullptr)) {
    pending_.erase(key);
    Unpend(tunnels_[frontend]);
    DropTunnel(frontend);
    return "agent disconnected";
  }
  UpdateGauges();
  return "";
}

void Router::OnDialResponse(AgentLink* agent, const wire::Packet& packet) {
  absl::MutexLock lock(&mu_);
  const auto& rsp = packet.dialresponse();
  auto it = pending_.find({agent, rsp.random()});
  if (it == pending_.end()) {
    metrics_.dial_failures.WithLabels({"unrecognized_response"}).Inc();
    // The frontend left (or cancelled) first; do not leak the agent's connection.
    if (rsp.error().empty() && rsp.connectid() > 0) {
      (void)agent->SendToAgent(wire::MakeCloseRequest(rsp.connectid()), nullptr);
    }
    return;
  }
  Frontend* f = it->second;
  pending_.erase(it);
  Tunnel& t = tunnels_[f];
  Unpend(t);
  const absl::Duration took = base::MonotonicNow() - t.started;
  if (!rsp.error().empty() || rsp.connectid() <= 0) {
    LOG(WARNING) << "dial " << t.random << " to " << t.address << " via agent " << agent->agent_id()
                 << " failed after " << took << ": " << rsp.error();
    metrics_.dial_failures.WithLabels({"error_response"}).Inc();
    DropTunnel(f);
  } else if (f->Finished()) {
    // Upstream tells the agent, as the connection can never be used.
    LOG(WARNING) << "dial " << t.random << " to " << t.address << " via agent " << agent->agent_id()
                 << ": the frontend left before its DIAL_RSP";
    metrics_.dial_failures.WithLabels({"send_rsp"}).Inc();
    DropTunnel(f);
    (void)agent->SendToAgent(wire::MakeCloseRequest(rsp.connectid()), nullptr);
    UpdateGauges();
    return;
  } else {
    // Upstream observes successful dials only.
    metrics_.dial_duration.Observe(absl::ToDoubleSeconds(took));
    t.connect_id = rsp.connectid();
    established_[{agent, rsp.connectid()}] = f;
    if (agent->peer_window() > 0) {
      f->OnPeerWindow(agent->peer_window());
    }
    LOG(INFO) << "tunnel " << t.connect_id << " to " << t.address << " via agent "
              << agent->agent_id() << " established (dial " << t.random << " took " << took << ")";
  }
  UpdateGauges();
  DeliverOrAbort(f, packet, nullptr);
}

void Router::LogClosed(const Tunnel& t, const char* why) {
  LOG(INFO) << "tunnel " << t.connect_id << " to " << t.address << " via agent "
            << t.agent->agent_id() << " closed: " << why;
}

void Router::OnAgentData(AgentLink* agent, wire::Packet packet) {
  absl::MutexLock lock(&mu_);
  const int64_t id = packet.data().connectid();
  auto it = established_.find({agent, id});
  if (it == established_.end()) {
    metrics_.bad_packets.WithLabels({"unknown_connect_id"}).Inc();
    (void)agent->SendToAgent(wire::MakeCloseRequest(id), nullptr);
    return;
  }
  // A windowed agent sends no more than the frontend granted: nothing to hold the stream for.
  DeliverOrAbort(it->second, std::move(packet), agent->peer_window() > 0 ? nullptr : agent->gate());
}

void Router::OnAgentCredit(AgentLink* agent, const wire::Packet& packet) {
  absl::MutexLock lock(&mu_);
  // Credits cross CLOSE packets: one for a connection already gone is no error.
  if (auto it = established_.find({agent, packet.credit().connectid()}); it != established_.end()) {
    it->second->OnCredit(packet.credit().bytes());
  }
}

void Router::Credit(Frontend* frontend, int64_t connect_id, int64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = tunnels_.find(frontend);
  if (it == tunnels_.end() || it->second.connect_id != connect_id ||
      it->second.agent->peer_window() == 0) {
    return;
  }
  (void)it->second.agent->SendToAgent(wire::MakeCredit(connect_id, bytes), nullptr);
}

bool Router::OnAgentPacket(AgentLink* agent, wire::Packet packet) {
  switch (packet.type()) {
    case DIAL_RSP:
      OnDialResponse(agent, packet);
      return true;
    case DATA:
      OnAgentData(agent, std::move(packet));
      return true;
    case CLOSE_RSP:
      OnAgentClose(agent, packet);
      return true;
    case DRAIN:
      LOG(INFO) << "agent " << agent->agent_id() << " is draining";
      SetDraining(agent);
      return true;
    case SLUICE_CREDIT:
      if (agent->peer_window() == 0) {
        return false;  // not negotiated: a type this stream does not carry
      }
      OnAgentCredit(agent, packet);
      return true;
    default:
      return false;
  }
}

void Router::OnAgentClose(AgentLink* agent, const wire::Packet& packet) {
  absl::MutexLock lock(&mu_);
  auto it = established_.find({agent, packet.closeresponse().connectid()});
  if (it == established_.end()) {
    return;  // already closed from our side
  }
  Frontend* f = it->second;
  established_.erase(it);
  LogClosed(tunnels_[f], packet.closeresponse().error().empty()
                             ? "CLOSE_RSP"
                             : packet.closeresponse().error().c_str());
  DropTunnel(f);
  UpdateGauges();
  (void)f->Deliver(packet, nullptr);
}

void Router::DeliverOrAbort(Frontend* f, wire::Packet packet,
                            const std::shared_ptr<wire::ReadGate>& gate) {
  if (f->Deliver(std::move(packet), gate)) {
    return;
  }
  metrics_.overflow_closes.Inc();
  Forget(f);
  f->Abort("frontend queue overflow: the client is not reading");
}

bool Router::SendData(Frontend* frontend, wire::Packet data,
                      absl::AnyInvocable<void()> on_written) {
  absl::MutexLock lock(&mu_);
  auto it = tunnels_.find(frontend);
  if (it == tunnels_.end() || it->second.connect_id != data.data().connectid()) {
    return false;
  }
  return it->second.agent->SendToAgent(std::move(data), std::move(on_written));
}

bool Router::Close(Frontend* frontend, int64_t connect_id) {
  absl::MutexLock lock(&mu_);
  auto it = tunnels_.find(frontend);
  if (it == tunnels_.end() || it->second.connect_id != connect_id) {
    return false;
  }
  // Stay established until the agent's CLOSE_RSP, which the frontend is waiting for.
  return it->second.agent->SendToAgent(wire::MakeCloseRequest(connect_id), nullptr);
}

void Router::CancelDial(Frontend* frontend, int64_t random) {
  absl::MutexLock lock(&mu_);
  auto it = tunnels_.find(frontend);
  if (it == tunnels_.end() || it->second.connect_id != 0 || it->second.random != random) {
    return;
  }
  metrics_.dial_failures.WithLabels({"frontend_close"}).Inc();
  Forget(frontend);
}

void Router::RemoveFrontend(Frontend* frontend) {
  absl::MutexLock lock(&mu_);
  Forget(frontend);
}

void Router::Forget(Frontend* f) {
  auto it = tunnels_.find(f);
  if (it == tunnels_.end()) {
    return;
  }
  const Tunnel t = it->second;
  DropTunnel(f);
  if (t.connect_id == 0) {
    pending_.erase({t.agent, t.random});
    Unpend(t);
    (void)t.agent->SendToAgent(wire::MakeCloseDial(t.random), nullptr);
  } else {
    established_.erase({t.agent, t.connect_id});
    LogClosed(t, "the frontend went away");
    (void)t.agent->SendToAgent(wire::MakeCloseRequest(t.connect_id), nullptr);
  }
  UpdateGauges();
}

void Router::AddTunnel(Frontend* f, Tunnel t) {
  ++tunnels_by_client_[t.client];
  ++tunnels_by_agent_[t.agent];
  tunnels_[f] = std::move(t);
}

void Router::DropTunnel(Frontend* f) {
  auto it = tunnels_.find(f);
  if (it == tunnels_.end()) {
    return;
  }
  if (auto c = tunnels_by_client_.find(it->second.client); --c->second == 0) {
    tunnels_by_client_.erase(c);
  }
  if (auto a = tunnels_by_agent_.find(it->second.agent); --a->second == 0) {
    tunnels_by_agent_.erase(a);
  }
  tunnels_.erase(it);
}

void Router::Unpend(const Tunnel& t) {
  auto it = pending_by_client_.find(t.client);
  if (it != pending_by_client_.end() && --it->second == 0) {
    pending_by_client_.erase(it);
  }
}

int Router::ReadyAgents() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(agents_.size());
}

void Router::UpdateGauges() {
  metrics_.ready_backends.Set(static_cast<double>(agents_.size()));
  metrics_.pending_dials.Set(static_cast<double>(pending_.size()));
  metrics_.established.Set(static_cast<double>(established_.size()));
}

}  // namespace sluice::tunnel::server
