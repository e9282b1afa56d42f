// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/worker.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/socket.h"

#include "agent/dataplane/proxy/backend_dialer.h"

namespace sluice::proxy {

namespace {

// Accepts per readiness event before yielding to other listeners (the listener is
// level-triggered, so the rest are served in the next iteration).
constexpr int kAcceptBatch = 64;
// How long listeners stay unwatched when even the reserve fd is gone.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

void Reset(base::UniqueFd& fd) {
  if (fd) {
    (void)net::SetLingerZero(fd.get());  // best effort: close() then sends RST
    fd.Reset();
  }
}

}  // namespace

// One accepted client: dials a backend, then hands both sockets to a TcpSession.
// Thread: owning worker loop.
class Connection final : public event::DeferredDeletable,
                         public BackendDialerCallbacks,
                         public TcpSessionCallbacks {
 public:
  Connection(Worker& worker, ListenKey key, base::UniqueFd client,
             const net::SocketAddress& client_addr, const Route& route)
      : worker_(worker),
        key_(key),
        client_addr_(client_addr),
        active_(route.active),
        client_(std::move(client)),
        dialer_(std::make_unique<BackendDialer>(*worker.loop_, route.balancer, client_addr.ip(),
                                                worker.options_.dial_budget, *this)) {
    active_->fetch_add(1, std::memory_order_relaxed);
  }
  ~Connection() override { active_->fetch_sub(1, std::memory_order_relaxed); }

  void Start() { dialer_->Start(); }
  const ListenKey& key() const { return key_; }
  const net::IpAddress& client_ip() const { return client_addr_.ip(); }

  ConnectionInfo Describe() const {
    ConnectionInfo info{.worker = worker_.id_,
                        .listener = key_.ToString(),
                        .client = client_addr_.ToString(),
                        .backend = dialer_->endpoint().ToString(),
                        .path = "dialling"};
    if (session_ != nullptr) {
      info.path = PathName(session_->path());
      info.to_backend = session_->DirectionState(true);
      info.to_client = session_->DirectionState(false);
      info.bytes_to_backend = session_->bytes_to_backend();
      info.bytes_to_client = session_->bytes_to_client();
    }
    return info;
  }

  void Drain(absl::Duration after) {
    if (drain_timer_ == nullptr) {
      drain_timer_ = worker_.loop_->CreateTimer([this] { Abort(); });
      drain_timer_->Arm(after);
    }
  }

  void Abort() {
    if (session_) {
      session_->Abort();  // reports OnSessionClosed
    } else if (!finished_) {
      Reset(client_);
      Finish();
    }
  }

  // BackendDialerCallbacks
  void OnDialAttemptFailed(DialFailure reason) override {
    worker_.metrics_.dial_failures.WithLabels({DialFailureName(reason)}).Inc();
    if (reason == DialFailure::kLocalResources) {
      worker_.metrics_.connections_shed.Inc();
    }
  }
  void OnDialed(BackendDialer&, base::UniqueFd backend) override {
    // Every connection starts on splice; a quiet one moves into the kernel (SockmapPromotion).
    auto session = TcpSession::Create(*worker_.loop_, worker_.pipes_, std::move(client_),
                                      std::move(backend), worker_.options_.session, *this,
                                      worker_.sockmap_.get(), /*sockmap_at_start=*/false);
    if (!session.ok()) {
      LOG(WARNING) << "session for " << key_.ToString() << ": " << session.status();
      worker_.metrics_.connections_failed.Inc();
      Finish();
      return;
    }
    session_ = std::move(*session);
  }
  void OnDialGaveUp(BackendDialer&) override {
    worker_.metrics_.connections_failed.Inc();
    Reset(client_);
    Finish();
  }

  // TcpSessionCallbacks
  void OnSessionClosed(TcpSession& session, CloseReason reason) override {
    DataPathMetrics& m = worker_.metrics_;
    m.bytes_to_backend.Inc(static_cast<double>(session.bytes_to_backend()));
    m.bytes_to_client.Inc(static_cast<double>(session.bytes_to_client()));
    CountPathBytes(session);
    m.path_connections.WithLabels({PathName(session.path())}).Inc();
    if (auto fallback = session.fallback()) {
      m.sockmap_fallbacks.WithLabels({fastpath::FallbackName(*fallback)}).Inc();
    }
    m.closed.WithLabels({PathName(session.path()), CloseReasonName(reason)}).Inc();
    Finish();
  }

 private:
  // Bytes by the path that moved them: a sockmap connection's pumps move what went before
  // enrolment, bytes the verdict passed during a pause, and what is left when a direction
  // ends; those count as splice or copy.
  void CountPathBytes(const TcpSession& session) {
    DataPathMetrics& m = worker_.metrics_;
    const uint64_t kernel_up = session.kernel_bytes_to_backend();
    const uint64_t kernel_down = session.kernel_bytes_to_client();
    auto user = [&](bool up) {
      return session.pump_path(up) == SplicePump::Path::kCopy ? "copy" : "splice";
    };
    m.path_bytes.WithLabels({"sockmap", "to_backend"}).Inc(static_cast<double>(kernel_up));
    m.path_bytes.WithLabels({"sockmap", "to_client"}).Inc(static_cast<double>(kernel_down));
    m.path_bytes.WithLabels({user(true), "to_backend"})
        .Inc(static_cast<double>(session.bytes_to_backend() - kernel_up));
    m.path_bytes.WithLabels({user(false), "to_client"})
        .Inc(static_cast<double>(session.bytes_to_client() - kernel_down));
    m.sockmap_repeated.Inc(static_cast<double>(session.kernel_bytes_repeated()));
  }

  void Finish() {
    if (!finished_) {
      finished_ = true;
      worker_.Finished(this);
    }
  }

  Worker& worker_;
  const ListenKey key_;
  const net::SocketAddress client_addr_;
  const std::shared_ptr<std::atomic<int64_t>> active_;
  base::UniqueFd client_;
  std::unique_ptr<BackendDialer> dialer_;
  std::unique_ptr<TcpSession> session_;
  std::unique_ptr<event::Timer> drain_timer_;
  bool finished_ = false;
};

Worker::Worker(int id, const Options& options, DataPathMetrics& metrics,
               std::unique_ptr<event::LoopThread> thread)
    : id_(id),
      options_(options),
      metrics_(metrics),
      thread_(std::move(thread)),
      loop_(&thread_->loop()),
      pipes_(options.pipes),
      udp_flows_(options.udp.max_flows, options.udp.max_flows_per_source, options.fds),
      tcp_sources_(options.max_connections_per_source),
      routes_(std::make_shared<RouteTable>()),
      reserve_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(int id, const Options& options,
                                                       DataPathMetrics& metrics) {
  // top -H, perf and gdb tell the workers apart by the thread's name.
  ASSIGN_OR_RETURN(auto thread,
                   event::LoopThread::Create(absl::StrCat("worker-", id), *options.clock));
  auto worker = std::unique_ptr<Worker>(new Worker(id, options, metrics, std::move(thread)));
  if (options.sockmap != nullptr) {
    absl::Status started;
    worker->RunAndWait([&] { started = worker->StartSockmap(); }, absl::InfiniteDuration());
    RETURN_IF_ERROR(started);
  }
  return worker;
}

absl::Status Worker::StartSockmap() {
  sockmap_ = std::unique_ptr<SockmapContext>(
      new SockmapContext{.fast_path = *options_.sockmap,
                         .ring = static_cast<uint32_t>(id_),
                         .flow = {.marks = options_.sockmap_marks,
                                  .paused = metrics_.sockmap_paused,
                                  .pauses = metrics_.sockmap_pauses},
                         .promotion = options_.sockmap_promotion});
  ASSIGN_OR_RETURN(ring_, fastpath::FlowRing::Create(
                              *options_.sockmap, sockmap_->ring,
                              [this](uint64_t cookie, uint64_t) { sockmap_->Dispatch(cookie); }));
  ASSIGN_OR_RETURN(ring_event_,
                   loop_->Watch(ring_->fd(), EPOLLIN, [this](uint32_t) { ring_->Consume(); }));
  return absl::OkStatus();
}

Worker::~Worker() {
  thread_->Stop();
  // The loop no longer runs: tear down here, connections first (their sockets reset).
  const auto open = connections_.size();
  for (const auto& [raw, conn] : connections_) {
    ReleaseConnection(raw->client_ip());
  }
  connections_.clear();
  listeners_.clear();
  udp_keys_.clear();
  metrics_.connections_active.Add(-static_cast<double>(open));
}

void Worker::SetRoutes(RouteTablePtr routes) {
  loop_->Post([this, routes = std::move(routes)]() mutable {
    DrainRemoved(*routes);
    routes_ = std::move(routes);
    UpdateUdpRoutes();
  });
}

void Worker::AddTcpListener(const ListenKey& key, std::shared_ptr<const base::UniqueFd> fd,
                            bool shared) {
  loop_->Post([this, key, fd = std::move(fd), shared]() mutable {
    Listener listener{.fd = std::move(fd), .shared = shared};
    if (absl::Status st = WatchListener(key, listener); !st.ok()) {
      LOG(ERROR) << "worker " << id_ << ": listen " << key.ToString() << ": " << st;
      return;
    }
    listeners_[key] = std::move(listener);
  });
}

absl::Status Worker::WatchListener(const ListenKey& key, Listener& listener) {
  // A shared socket wakes one waiting worker per connection instead of all of them; a busy
  // worker is not waiting, so an idle one takes the connection.
  const int raw = listener.fd->get();
  ASSIGN_OR_RETURN(listener.event, loop_->Watch(raw, listener.Events(), [this, key, raw](uint32_t) {
    OnAcceptable(key, raw);
  }));
  return absl::OkStatus();
}

void Worker::AddUdpListener(const ListenKey& key, base::UniqueFd fd) {
  loop_->Post([this, key, fd = std::move(fd)]() mutable { StartUdpListener(key, std::move(fd)); });
}

void Worker::StartUdpListener(const ListenKey& key, base::UniqueFd fd) {
  auto route = routes_->find(key);
  auto udp = UdpProxy::Create(*loop_, udp_arena_, udp_flows_, std::move(fd),
                              route == routes_->end() ? nullptr : route->second.balancer,
                              options_.udp, metrics_);
  if (!udp.ok()) {
    LOG(ERROR) << "worker " << id_ << ": listen " << key.ToString() << ": " << udp.status();
    return;
  }
  if (route != routes_->end()) {
    (*udp)->SetSources(route->second.sources);
  }
  listeners_[key] = Listener{.udp = std::move(*udp)};
  udp_keys_.insert(key);
}

// Flows to endpoints that left the route close here; a listener whose route is gone keeps
// no flows until the control plane removes it.
void Worker::UpdateUdpRoutes() {
  for (const ListenKey& key : udp_keys_) {
    auto it = listeners_.find(key);
    if (it == listeners_.end() || it->second.udp == nullptr) {
      continue;
    }
    auto route = routes_->find(key);
    const bool found = route != routes_->end();
    it->second.udp->SetBalancer(found ? route->second.balancer : nullptr);
    it->second.udp->SetSources(found ? route->second.sources : nullptr);
  }
}

bool Worker::RunAndWait(absl::AnyInvocable<void() &&> fn, absl::Duration timeout) {
  // Shared with the posted task, which may run after a timed-out caller has returned.
  auto done = std::make_shared<absl::Notification>();
  loop_->Post([fn = std::move(fn), done]() mutable {
    std::move(fn)();
    done->Notify();
  });
  return done->WaitForNotificationWithTimeout(timeout);
}

bool Worker::Flush(absl::Duration timeout) {
  return RunAndWait([] {}, timeout);
}

std::vector<ConnectionInfo> Worker::Connections(absl::Duration timeout) {
  auto infos = std::make_shared<std::vector<ConnectionInfo>>();
  bool done = RunAndWait(
      [this, infos] {
        infos->reserve(connections_.size());
        for (const auto& [raw, conn] : connections_) {
          infos->push_back(raw->Describe());
        }
      },
      timeout);
  return done ? std::move(*infos) : std::vector<ConnectionInfo>{};
}

void Worker::RemoveListener(const ListenKey& key) {
  loop_->Post([this, key] {
    listeners_.erase(key);
    udp_keys_.erase(key);
  });
}

void Worker::OnAcceptable(const ListenKey& key, int listen_fd) {
  for (int i = 0; i < kAcceptBatch; ++i) {
    sockaddr_storage peer;
    socklen_t len = sizeof(peer);
    base::UniqueFd client(::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                                    SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (errno == EINTR || errno == ECONNABORTED) {
        continue;
      }
      if (errno == EMFILE || errno == ENFILE) {
        if (Shed(listen_fd)) {
          continue;
        }
        PauseAccepting();
        return;
      }
      if (errno != EAGAIN) {
        LOG(WARNING) << "accept on " << key.ToString() << ": " << strerror(errno);
      }
      return;
    }
    metrics_.connections_total.Inc();
    if (connections_.size() >= options_.max_connections) {
      metrics_.connections_limited.Inc();
      Reset(client);
      continue;
    }
    auto route = routes_->find(key);
    auto client_addr = net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&peer), len);
    if (route == routes_->end() || !client_addr) {
      Reset(client);  // the route went away between sync steps
      continue;
    }
    // loadBalancerSourceRanges: a reset, so that a refused client does not hang in a retry.
    if (route->second.sources != nullptr && !route->second.sources->Admit(client_addr->ip())) {
      Reset(client);
      continue;
    }
    if (!AdmitConnection(client_addr->ip())) {
      Reset(client);
      continue;
    }
    auto conn =
        std::make_unique<Connection>(*this, key, std::move(client), *client_addr, route->second);
    Connection* raw = conn.get();
    connections_.emplace(raw, std::move(conn));
    metrics_.connections_active.Add(1);
    raw->Start();
  }
}

bool Worker::AdmitConnection(const net::IpAddress& client) {
  // Two descriptors: the client's and the backend's.
  if (options_.fds != nullptr && options_.fds->Full(2)) {
    metrics_.connections_shed.Inc();
    return false;
  }
  if (!tcp_sources_.TryAdd(client)) {
    metrics_.connections_source_limited.Inc();
    return false;
  }
  if (options_.fds != nullptr) {
    options_.fds->Take(2);
  }
  return true;
}

void Worker::ReleaseConnection(const net::IpAddress& client) {
  tcp_sources_.Remove(client);
  if (options_.fds != nullptr) {
    options_.fds->Give(2);
  }
}

bool Worker::Shed(int listen_fd) {
  if (loop_->MonotonicNow() - last_shed_log_ > absl::Seconds(10)) {  // may fire per accept
    last_shed_log_ = loop_->MonotonicNow();
    LOG(WARNING) << "worker " << id_ << ": out of file descriptors, resetting new connections";
  }
  if (!reserve_fd_) {
    return false;
  }
  metrics_.connections_shed.Inc();
  reserve_fd_.Reset();
  base::UniqueFd victim(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  Reset(victim);
  reserve_fd_.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  return true;
}

void Worker::PauseAccepting() {
  if (resume_timer_ == nullptr) {
    resume_timer_ = loop_->CreateTimer([this] { ResumeAccepting(); });
  }
  if (resume_timer_->armed()) {
    return;
  }
  for (auto& [key, listener] : listeners_) {
    if (listener.event != nullptr) {
      // EPOLL_CTL_MOD refuses an EPOLLEXCLUSIVE registration: leave epoll instead (safe from
      // the listener's own callback, unlike destroying its FileEvent).
      listener.event->Cancel();
    }
  }
  resume_timer_->Arm(kAcceptPause);
}

void Worker::ResumeAccepting() {
  if (!reserve_fd_) {
    reserve_fd_.Reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  for (auto& [key, listener] : listeners_) {
    if (listener.event != nullptr) {
      (void)listener.event->Modify(listener.Events());  // ADD again: cannot fail
    }
  }
}

void Worker::Finished(Connection* conn) {
  auto it = connections_.find(conn);
  if (it == connections_.end()) {
    return;
  }
  metrics_.connections_active.Add(-1);
  ReleaseConnection(conn->client_ip());
  loop_->DeferDelete(std::move(it->second));
  connections_.erase(it);
}

void Worker::DrainRemoved(const RouteTable& next) {
  if (options_.drain_timeout <= absl::ZeroDuration()) {
    return;
  }
  for (auto& [raw, conn] : connections_) {
    if (!next.contains(conn->key())) {
      conn->Drain(options_.drain_timeout);
    }
  }
}

}  // namespace sluice::proxy
