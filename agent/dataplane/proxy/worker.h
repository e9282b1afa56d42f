// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/epoll.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/base/clock.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"
#include "lib/event/loop_thread.h"

#include "agent/dataplane/fastpath/flow_ring.h"
#include "agent/dataplane/fastpath/sockmap_fast_path.h"
#include "agent/dataplane/proxy/admission.h"
#include "agent/dataplane/proxy/data_path_metrics.h"
#include "agent/dataplane/proxy/pipe_pool.h"
#include "agent/dataplane/proxy/route_table.h"
#include "agent/dataplane/proxy/sockmap_session.h"
#include "agent/dataplane/proxy/tcp_session.h"
#include "agent/dataplane/proxy/udp_flow_table.h"
#include "agent/dataplane/proxy/udp_proxy.h"

namespace sluice::proxy {

class Connection;

// One TCP connection as /debug/connections shows it.
struct ConnectionInfo {
  int worker = 0;        // the worker that accepted it
  std::string listener;  // "tcp/10.96.0.10:80"
  std::string client;    // the client's address
  std::string backend;   // the endpoint dialled (the last attempt while dialling)
  // "dialling", or the session's path: "sockmap", "splice" or "copy".
  std::string path;
  // Per direction: "attached", "paused", "draining" (kernel), "user:splice" (a sockmap
  // direction handed to its pump), "splice" or "copy".
  std::string to_backend, to_client;
  uint64_t bytes_to_backend = 0, bytes_to_client = 0;
};

// One data-path thread: its EventLoop, the listeners the control plane hands it (it creates the
// sockets, so bind errors surface in its sync, and posts them here: a TCP socket that every
// worker watches, or this worker's socket of a per-worker SO_REUSEPORT group; a UDP socket
// that only this worker serves), and the connections and flows they carry. Receives immutable
// RouteTables; takes no control-plane lock.
// Thread: its own loop thread (an event::LoopThread); the public methods are thread-safe (they
// post).
class Worker final {
 public:
  struct Options {
    // Total time to find an answering endpoint for a new connection.
    absl::Duration dial_budget = absl::Seconds(5);
    // Connections of a removed listener run to completion (0), or are reset after this long.
    absl::Duration drain_timeout = absl::ZeroDuration();
    // Open connections (dialling included) beyond which new ones are reset at accept.
    size_t max_connections = 32768;
    // Open connections of one client IP beyond which its new ones are reset at accept.
    size_t max_connections_per_source = 1024;
    // The data path's descriptors (not owned; outlives the worker), or null for no budget.
    FdBudget* fds = nullptr;
    TcpSession::Options session;
    PipePool::Options pipes;
    UdpOptions udp;
    // The node's sockmap fast path (not owned; outlives the worker), or null for splice only.
    // The worker uses ring index `id`.
    fastpath::SockmapFastPath* sockmap = nullptr;
    SockmapWatermarks sockmap_marks;
    SockmapPromotion sockmap_promotion;
    // The process's clock (outlives the worker): the loop's timers, deadlines and idle checks.
    const base::Clock* clock = &base::RealClock::Get();
  };

  static absl::StatusOr<std::unique_ptr<Worker>> Create(int id, const Options& options,
                                                        DataPathMetrics& metrics);
  ~Worker();  // stops the thread; open connections are reset

  void SetRoutes(RouteTablePtr routes);
  // Watches a listening TCP socket for `key`. `shared`: every worker watches this one socket
  // (EPOLLEXCLUSIVE wakes one of those waiting); else it is this worker's of a reuseport group.
  void AddTcpListener(const ListenKey& key, std::shared_ptr<const base::UniqueFd> fd, bool shared);
  // Serves a bound UDP socket for `key`; its flows live on this worker only.
  void AddUdpListener(const ListenKey& key, base::UniqueFd fd);
  // Closes this worker's socket for `key` (posted: Flush waits for it); its established TCP
  // connections continue, its UDP flows close.
  void RemoveListener(const ListenKey& key);
  // Waits up to `timeout` until everything posted before this call has run. Returns false on
  // timeout. Never call it from a worker thread.
  bool Flush(absl::Duration timeout);
  // The worker's open connections, gathered on its thread. Thread-safe, but blocks up to
  // `timeout` for the loop: never call it from a worker thread. Empty on timeout.
  std::vector<ConnectionInfo> Connections(absl::Duration timeout);

 private:
  friend class Connection;
  struct Listener {
    std::shared_ptr<const base::UniqueFd> fd;  // TCP; closed by the last worker to let go
    bool shared = false;                       // watched by every worker (EPOLLEXCLUSIVE)
    std::unique_ptr<event::FileEvent> event;   // after fd: unregisters before the close
    std::unique_ptr<UdpProxy> udp;             // UDP: owns its socket and flows
    uint32_t Events() const { return shared ? EPOLLIN | EPOLLEXCLUSIVE : EPOLLIN; }
  };

  Worker(int id, const Options& options, DataPathMetrics& metrics,
         std::unique_ptr<event::LoopThread> thread);
  // Runs `fn` on the loop thread and waits up to `timeout` for it; on timeout `fn` still runs
  // later, so it must own what it touches.
  bool RunAndWait(absl::AnyInvocable<void() &&> fn, absl::Duration timeout);
  absl::Status StartSockmap();
  // Registers a TCP listener's socket with the loop.
  absl::Status WatchListener(const ListenKey& key, Listener& listener);
  void OnAcceptable(const ListenKey& key, int fd);
  // Counts a new connection of `client` against its source's cap and the fd budget; false
  // (counted in the metrics) if it must be reset.
  bool AdmitConnection(const net::IpAddress& client);
  void ReleaseConnection(const net::IpAddress& client);
  // At EMFILE/ENFILE: accepts one pending connection on the reserve fd and resets it. Returns
  // false when there is no reserve to spend (another thread took the freed fd).
  bool Shed(int listen_fd);
  // Without a reserve fd a level-triggered listener would spin: stop watching every listener
  // until the resume timer, which also retries the reserve.
  void PauseAccepting();
  void ResumeAccepting();
  void Finished(Connection* conn);
  void DrainRemoved(const RouteTable& next);
  void StartUdpListener(const ListenKey& key, base::UniqueFd fd);
  void UpdateUdpRoutes();

  const int id_;
  const Options options_;
  DataPathMetrics& metrics_;
  // Declared before everything registered with its loop, so that the loop goes last.
  std::unique_ptr<event::LoopThread> thread_;
  event::EventLoop* const loop_;  // thread_'s
  PipePool pipes_;
  DatagramArena udp_arena_;  // before listeners_: their UdpProxies use it
  UdpFlowTable udp_flows_;   // likewise
  SourceCounter tcp_sources_;
  RouteTablePtr routes_;
  // Sockmap fast path: the context sessions share, and this worker's signal ring. Declared
  // before connections_ so that sessions unregister from it before it goes.
  std::unique_ptr<SockmapContext> sockmap_;
  std::unique_ptr<fastpath::FlowRing> ring_;
  std::unique_ptr<event::FileEvent> ring_event_;
  std::map<ListenKey, Listener> listeners_;
  // Of listeners_, the UDP ones: each route update re-points them, and walking every listener
  // for it cost ~0.25 ms per change at 10,000 TCP listeners (the most of a one-endpoint sync).
  std::set<ListenKey> udp_keys_;
  absl::flat_hash_map<Connection*, std::unique_ptr<Connection>> connections_;
  // Kept open so that at EMFILE one fd can be freed to accept and reset a connection instead
  // of leaving it in the backlog, where a level-triggered listener would spin.
  base::UniqueFd reserve_fd_;
  base::MonoTime last_shed_log_ = base::MonoTime::InfinitePast();
  std::unique_ptr<event::Timer> resume_timer_;
};

}  // namespace sluice::proxy
