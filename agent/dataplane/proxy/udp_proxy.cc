// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_proxy.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "lib/net/socket.h"

namespace sluice::proxy {

// One client's flow: its connected backend socket and idle timer.
// Thread: owning worker loop.
class UdpProxy::Flow final : public event::DeferredDeletable, public UdpFlowTable::Entry {
 public:
  Flow(UdpProxy& owner, const net::SocketAddress& client, const net::SocketAddress& backend,
       base::UniqueFd fd)
      : Entry(client.ip()), client(client), backend(backend), fd(std::move(fd)), owner_(owner) {}

  const net::SocketAddress client;
  const net::SocketAddress backend;
  // The client's address as recvmmsg reported it (keeps an IPv6 scope id), for the replies.
  sockaddr_storage client_sa{};
  socklen_t client_sa_len = 0;
  // IP_PKTINFO/IPV6_PKTINFO naming the reply source; empty unless the listener is a wildcard.
  alignas(cmsghdr) std::array<char, DatagramArena::kControlSize> control{};
  size_t control_len = 0;
  UdpGsoState to_backend_gso;
  UdpGsoState to_client_gso;
  base::MonoTime last_active;  // the loop's time of the last datagram either way
  base::UniqueFd fd;
  std::unique_ptr<event::FileEvent> event;  // after fd
  std::unique_ptr<event::Timer> idle;

 private:
  void Evict() override {
    owner_.metrics_.udp_flows_evicted.Inc();
    owner_.CloseFlow(*this);
  }

  UdpProxy& owner_;
};

namespace {

constexpr const char* kDropNames[] = {"no_endpoint",   "flow_limit",   "backend_refused",
                                      "backend_error", "socket_error", "send_failed",
                                      "truncated",     "source_range"};

// A connected socket makes the kernel filter the backend's replies for us and report its ICMP
// errors (ECONNREFUSED on port unreachable) on the flow: an unconnected UDP socket without
// IP_RECVERR never sees them (man 7 udp, "Error handling"). Sets *err on failure.
base::UniqueFd ConnectUdp(const net::SocketAddress& backend, int* err) {
  base::UniqueFd fd(socket(backend.ip().is_v4() ? AF_INET : AF_INET6,
                           SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    *err = errno;
    return fd;
  }
  sockaddr_storage ss;
  const socklen_t len = backend.ToSockaddr(&ss);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    *err = errno;  // synchronous only: ENETUNREACH, EADDRNOTAVAIL (no free ephemeral port)
    fd.Reset();
  }
  return fd;
}

// The control message that makes a wildcard socket reply from the address the client sent to,
// built from the datagram's IP_PKTINFO/IPV6_PKTINFO (man 7 ip, man 7 ipv6). Returns its length,
// 0 if the datagram carried none.
size_t ReplySource(msghdr& hdr, char* out) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&hdr); c != nullptr; c = CMSG_NXTHDR(&hdr, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo in;
      std::memcpy(&in, CMSG_DATA(c), sizeof(in));
      in_pktinfo reply{};
      reply.ipi_spec_dst = in.ipi_addr;  // ifindex 0: routing picks the way out
      return PutCmsg(out, IPPROTO_IP, IP_PKTINFO, &reply, sizeof(reply));
    }
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo in;
      std::memcpy(&in, CMSG_DATA(c), sizeof(in));
      in6_pktinfo reply{};
      reply.ipi6_addr = in.ipi6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&in.ipi6_addr)) {
        reply.ipi6_ifindex = in.ipi6_ifindex;  // a link-local source needs its interface
      }
      return PutCmsg(out, IPPROTO_IPV6, IPV6_PKTINFO, &reply, sizeof(reply));
    }
  }
  return 0;
}

// Per-listener receive queue. sluice shares the node's CPUs, and while the worker is
// descheduled the queue alone absorbs the traffic: the default (net.core.rmem_default, 212992
// bytes) at ~770 bytes of truesize per small datagram holds under 300 of them, 6 ms at 50 kpps.
// 4 MiB holds ~5,000 (~100 ms). Memory is charged only while datagrams wait.
constexpr int kListenerReceiveBuffer = 4 << 20;

// SO_RCVBUFFORCE (CAP_NET_ADMIN) may exceed net.core.rmem_max; SO_RCVBUF is capped at it.
void GrowReceiveBuffer(int fd) {
  const int size = kListenerReceiveBuffer;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) != 0) {
    VLOG(1) << "SO_RCVBUF " << size << " on udp listener: " << strerror(errno);
  }
}

// Points every message of the arena at its own buffer, optionally with name and control space.
void PrepareReceive(DatagramArena& a, bool with_name, bool with_control) {
  for (int i = 0; i < DatagramArena::kBatch; ++i) {
    a.iov[i] = iovec{a.Buffer(i), DatagramArena::kMaxDatagram};
    msghdr& h = a.msgs[i].msg_hdr;
    h = msghdr{};
    h.msg_iov = &a.iov[i];
    h.msg_iovlen = 1;
    if (with_name) {
      h.msg_name = &a.names[i];
      h.msg_namelen = sizeof(sockaddr_storage);
    }
    if (with_control) {
      h.msg_control = a.control[i].data();
      h.msg_controllen = DatagramArena::kControlSize;
    }
  }
}

int ReceiveBatch(int fd, DatagramArena& a) {
  int n;
  do {
    n = recvmmsg(fd, a.msgs.data(), DatagramArena::kBatch, MSG_DONTWAIT, nullptr);
  } while (n < 0 && errno == EINTR);
  return n;
}

}  // namespace

UdpProxy::UdpProxy(event::EventLoop& loop, DatagramArena& arena, UdpFlowTable& table,
                   base::UniqueFd socket, net::SocketAddress local,
                   std::shared_ptr<Balancer> balancer, const UdpOptions& options,
                   DataPathMetrics& metrics)
    : loop_(loop),
      arena_(arena),
      table_(table),
      options_(options),
      metrics_(metrics),
      local_(local),
      wildcard_(local.ip().IsUnspecified()),
      socket_(std::move(socket)),
      balancer_(std::move(balancer)) {
  static_assert(std::size(kDropNames) == static_cast<size_t>(Drop::kCount));
  for (size_t i = 0; i < dropped_.size(); ++i) {
    dropped_[i] = &metrics_.udp_dropped.WithLabels({kDropNames[i]});  // once: takes a mutex
  }
}

absl::StatusOr<std::unique_ptr<UdpProxy>> UdpProxy::Create(
    event::EventLoop& loop, DatagramArena& arena, UdpFlowTable& table, base::UniqueFd socket,
    std::shared_ptr<Balancer> balancer, const UdpOptions& options, DataPathMetrics& metrics) {
  ASSIGN_OR_RETURN(net::SocketAddress local, net::LocalAddress(socket.get()));
  GrowReceiveBuffer(socket.get());
  auto proxy = std::unique_ptr<UdpProxy>(new UdpProxy(loop, arena, table, std::move(socket), local,
                                                      std::move(balancer), options, metrics));
  // Level-triggered: one batch per wake-up, the rest in the next iteration, after the others.
  ASSIGN_OR_RETURN(proxy->event_,
                   loop.Watch(proxy->socket_.get(), EPOLLIN,
                              [p = proxy.get()](uint32_t) { p->OnListenerReadable(); }));
  return proxy;
}

UdpProxy::~UdpProxy() {
  for (auto& [client, flow] : flows_) {
    table_.Erase(*flow);
  }
  metrics_.udp_flows.Add(-static_cast<double>(flows_.size()));
}

void UdpProxy::SetBalancer(std::shared_ptr<Balancer> balancer) {
  if (balancer == balancer_) {
    return;
  }
  balancer_ = std::move(balancer);
  absl::flat_hash_set<net::SocketAddress> live;
  if (balancer_ != nullptr) {
    live.insert(balancer_->endpoints().begin(), balancer_->endpoints().end());
  }
  std::vector<Flow*> gone;
  for (const auto& [client, flow] : flows_) {
    if (!live.contains(flow->backend)) {
      gone.push_back(flow.get());
    }
  }
  for (Flow* flow : gone) {
    CloseFlow(*flow);
  }
}

void UdpProxy::SetSources(std::shared_ptr<const SourceFilter> sources) {
  if (sources == sources_) {
    return;
  }
  sources_ = std::move(sources);
  std::vector<Flow*> gone;
  for (const auto& [client, flow] : flows_) {
    if (sources_ != nullptr && !sources_->Contains(client.ip())) {
      gone.push_back(flow.get());
    }
  }
  for (Flow* flow : gone) {
    CloseFlow(*flow);
  }
}

void UdpProxy::OnListenerReadable() {
  PrepareReceive(arena_, /*with_name=*/true, /*with_control=*/wildcard_);
  const int n = ReceiveBatch(socket_.get(), arena_);
  if (n < 0) {
    // EAGAIN: a spurious wake-up. An unconnected socket gets no ICMP errors, so anything
    // else is unexpected.
    if (errno != EAGAIN) {
      LOG(WARNING) << "recvmmsg on udp " << local_.ToString() << ": " << strerror(errno);
    }
    return;
  }
  // Consecutive datagrams of one client (the common case: a busy flow fills the batch) go out
  // in one sendmmsg on its connected socket, compacted into out[] so that a run is contiguous.
  int forwarded = 0;
  Flow* run_flow = nullptr;
  int run_start = 0;
  int count = 0;
  for (int i = 0; i < n; ++i) {
    Flow* flow = FlowToBackend(i);
    if (flow == nullptr) {
      continue;
    }
    if (flow != run_flow) {
      forwarded += SendToBackend(run_flow, run_start, count - run_start);
      run_flow = flow;
      run_start = count;
    }
    arena_.out[count++] = iovec{arena_.Buffer(i), arena_.msgs[i].msg_len};
  }
  forwarded += SendToBackend(run_flow, run_start, count - run_start);
  if (forwarded > 0) {
    metrics_.udp_datagrams_to_backend.Inc(forwarded);  // once per batch: a CAS loop per Inc
  }
}

UdpProxy::Flow* UdpProxy::FlowToBackend(int i) {
  mmsghdr& m = arena_.msgs[i];
  if ((m.msg_hdr.msg_flags & MSG_TRUNC) != 0) {
    Count(Drop::kTruncated);
    return nullptr;
  }
  const auto client = net::SocketAddress::FromSockaddr(
      reinterpret_cast<const sockaddr*>(&arena_.names[i]), m.msg_hdr.msg_namelen);
  Flow* flow = client ? FlowFor(*client, m.msg_hdr) : nullptr;
  if (flow != nullptr) {
    flow->last_active = loop_.MonotonicNow();
    table_.Touch(*flow);
  }
  return flow;
}

int UdpProxy::SendToBackend(Flow* flow, int first, int count) {
  if (flow == nullptr || count == 0) {
    return 0;
  }
  if (!flow->fd) {  // evicted for a later datagram of this batch
    Count(Drop::kFlowLimit, count);
    return 0;
  }
  const UdpSendResult r = arena_.sender.Send(flow->fd.get(), &arena_.out[first], count, UdpPeer{},
                                             options_.gso ? &flow->to_backend_gso : nullptr);
  if (r.dropped > 0) {
    Count(Drop::kSendFailed, r.dropped);
  }
  if (r.hard_error != 0) {
    // A pending ICMP error of the connected socket is reported here too (ECONNREFUSED).
    BackendFailed(*flow, r.hard_error);
  }
  return r.delivered;
}

UdpProxy::Flow* UdpProxy::FlowFor(const net::SocketAddress& client, msghdr& hdr) {
  if (auto it = flows_.find(client); it != flows_.end()) {
    return it->second.get();
  }
  if (sources_ != nullptr && !sources_->Admit(client.ip())) {
    Count(Drop::kSourceRange);
    return nullptr;
  }
  switch (table_.Admit(client.ip())) {
    case UdpFlowTable::Admission::kAdmitted:
      return OpenFlow(client, hdr);
    case UdpFlowTable::Admission::kNoDescriptor:
      Count(Drop::kFlowLimit);
      return nullptr;
  }
  return nullptr;
}

UdpProxy::Flow* UdpProxy::OpenFlow(const net::SocketAddress& client, msghdr& hdr) {
  std::optional<net::SocketAddress> backend;
  if (balancer_ != nullptr) {
    backend = balancer_->Pick(client.ip(), loop_.MonotonicNow());
  }
  if (!backend) {
    Count(Drop::kNoEndpoint);
    return nullptr;
  }
  int err = 0;
  base::UniqueFd fd = ConnectUdp(*backend, &err);
  if (!fd) {
    SocketFailed(*backend, strerror(err));
    return nullptr;
  }
  auto flow = std::make_unique<Flow>(*this, client, *backend, std::move(fd));
  Flow* raw = flow.get();
  auto event =
      loop_.Watch(raw->fd.get(), EPOLLIN, [this, raw](uint32_t) { OnBackendReadable(*raw); });
  if (!event.ok()) {
    SocketFailed(*backend, base::Std(event.status().message()));
    return nullptr;
  }
  raw->event = std::move(*event);
  raw->idle = loop_.CreateTimer([this, raw] { OnIdleTimer(*raw); });
  raw->idle->Arm(options_.idle_timeout);
  std::memcpy(&raw->client_sa, hdr.msg_name, hdr.msg_namelen);
  raw->client_sa_len = hdr.msg_namelen;
  if (wildcard_) {
    raw->control_len = ReplySource(hdr, raw->control.data());
  }
  flows_.emplace(client, std::move(flow));
  table_.Insert(*raw);
  metrics_.udp_flows.Add(1);
  metrics_.udp_flows_total.Inc();
  return raw;
}

void UdpProxy::SocketFailed(const net::SocketAddress& backend, std::string_view cause) {
  Count(Drop::kSocketError);
  if (loop_.MonotonicNow() - last_error_log_ > absl::Seconds(10)) {  // may fire per datagram
    last_error_log_ = loop_.MonotonicNow();
    LOG(WARNING) << "udp " << local_.ToString() << ": flow to " << backend.ToString() << ": "
                 << cause;
  }
}

void UdpProxy::OnBackendReadable(Flow& flow) {
  PrepareReceive(arena_, /*with_name=*/false, /*with_control=*/false);
  const int n = ReceiveBatch(flow.fd.get(), arena_);
  if (n < 0) {
    if (errno != EAGAIN) {
      BackendFailed(flow, errno);  // the ICMP error queued on the socket (sk_err)
    }
    return;
  }
  flow.last_active = loop_.MonotonicNow();
  table_.Touch(flow);
  ReplyToClient(flow, n);
}

void UdpProxy::ReplyToClient(Flow& flow, int n) {
  DatagramArena& a = arena_;
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if ((a.msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0) {
      Count(Drop::kTruncated);
      continue;
    }
    a.out[count++] = iovec{a.Buffer(i), a.msgs[i].msg_len};
  }
  const UdpPeer client{.name = reinterpret_cast<const sockaddr*>(&flow.client_sa),
                       .name_len = flow.client_sa_len,
                       .control = flow.control_len > 0 ? flow.control.data() : nullptr,
                       .control_len = flow.control_len};
  const UdpSendResult r = a.sender.Send(socket_.get(), a.out.data(), count, client,
                                        options_.gso ? &flow.to_client_gso : nullptr);
  // The listening socket has no peer to blame for an error: it costs just that datagram.
  const int dropped = r.dropped + (r.hard_error != 0 ? 1 : 0);
  if (dropped > 0) {
    Count(Drop::kSendFailed, dropped);
  }
  if (r.delivered > 0) {
    metrics_.udp_datagrams_to_client.Inc(r.delivered);
  }
}

void UdpProxy::BackendFailed(Flow& flow, int err) {
  Count(err == ECONNREFUSED ? Drop::kBackendRefused : Drop::kBackendError);
  VLOG(2) << "udp " << local_.ToString() << ": " << flow.client.ToString() << " -> "
          << flow.backend.ToString() << ": " << strerror(err);
  if (balancer_ != nullptr) {
    balancer_->DialFailed(flow.client.ip());  // so that affinity does not pick it again
  }
  CloseFlow(flow);
}

void UdpProxy::OnIdleTimer(Flow& flow) {
  // Armed lazily: datagrams only bump last_active, and the timer re-arms for the remainder.
  const absl::Duration idle_for = loop_.MonotonicNow() - flow.last_active;
  if (idle_for < options_.idle_timeout) {
    flow.idle->Arm(options_.idle_timeout - idle_for);
    return;
  }
  CloseFlow(flow);
}

void UdpProxy::CloseFlow(Flow& flow) {
  auto it = flows_.find(flow.client);
  SLUICE_CHECK(it != flows_.end() && it->second.get() == &flow);
  std::unique_ptr<Flow> owned = std::move(it->second);
  flows_.erase(it);
  table_.Erase(*owned);
  owned->event->Detach();  // the close just below leaves the epoll set: no EPOLL_CTL_DEL
  owned->idle->Disarm();
  owned->fd.Reset();
  metrics_.udp_flows.Add(-1);
  loop_.DeferDelete(std::move(owned));
}

void UdpProxy::Count(Drop reason, int n) { dropped_[static_cast<size_t>(reason)]->Inc(n); }

}  // namespace sluice::proxy
