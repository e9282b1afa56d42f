// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/net/address.h"

#include "agent/control/proxier/listener_admission.h"
#include "agent/control/proxier/proxier.h"
#include "agent/dataplane/proxy/admission.h"
#include "agent/dataplane/proxy/data_path_metrics.h"
#include "agent/dataplane/proxy/route_table.h"
#include "agent/dataplane/proxy/worker.h"
#include "agent/dataplane/vip/vip_manager.h"

namespace sluice::fastpath {
class ReuseportBalancer;
}  // namespace sluice::fastpath

namespace sluice::proxier {

// The userspace proxy as a TableConsumer: for each service port it makes the service addresses
// local (VipManager), listens on every address that has endpoints (ClusterIPs, external and
// LoadBalancer IPs, NodePorts on node addresses), and posts the routes to the workers. A port
// without usable endpoints has no listener, so the kernel refuses its clients at once (TCP
// RST, ICMP port unreachable).
// Listeners cost one socket each, not one per worker: a UDP socket is served by one worker (a
// flow's datagrams must all reach the worker holding it); a TCP socket is watched by every
// worker, except that the first `reuseport_sockets` worth get a per-worker SO_REUSEPORT group,
// which the TCP balancer spreads in turn. Services over a listener cap are skipped whole, and a
// listener that fails to open is retried at the next sync: either way the rest of the table is
// served and the sync succeeds; Unserved() says what is missing and why.
// Thread: control plane; Listeners() and Unserved() are thread-safe.
class DataPath final : public TableConsumer {
 public:
  struct Options {
    int workers = 1;
    proxy::Worker::Options worker;
    std::vector<net::Cidr> nodeport_cidrs;  // node addresses for NodePorts; empty = all
    int backlog = 4096;
    ListenerCaps caps;
    // TCP listeners get a per-worker SO_REUSEPORT group while the groups hold at most this many
    // sockets (the connection rate of one shared socket is what a group buys); the rest share
    // one socket among the workers.
    size_t reuseport_sockets = 4096;
    // Descriptors kept free for the control plane (see proxy::FdBudget).
    int64_t fd_reserve = 4096;
    // Spreads new TCP connections over the workers in turn; null: the kernel's 4-tuple hash.
    // Not owned; outlives the DataPath.
    const fastpath::ReuseportBalancer* tcp_balancer = nullptr;
  };

  static absl::StatusOr<std::unique_ptr<DataPath>> Create(const Options& options,
                                                          vip::VipManager& vips,
                                                          proxy::DataPathMetrics& metrics);
  ~DataPath() override;

  // TableConsumer. Returns once every worker has taken the new routes and closed the removed
  // listeners.
  absl::Status Apply(const TableDelta& delta) override;

  // Every worker's open TCP connections, for /debug/connections. Thread-safe (the admin thread
  // calls it); waits briefly for each worker loop.
  std::vector<proxy::ConnectionInfo> Connections() const;

  // Open listeners ("tcp/10.96.0.10:80") by service port, for /debug/services. A removed one
  // is listed until Apply returns: once it is gone from here, its clients are refused.
  std::map<std::string, std::vector<std::string>> Listeners() const ABSL_LOCKS_EXCLUDED(mu_);
  // Service ports the proxy does not serve, or serves in part ("ns/name:port" -> why: SCTP,
  // over a listener cap, a listener that failed to open and is retried at every sync), for
  // /debug/services. Thread-safe.
  std::map<std::string, std::string> Unserved() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct BalancerState {
    std::vector<net::SocketAddress> endpoints;
    bool affinity = false;
    absl::Duration timeout;
    std::shared_ptr<proxy::Balancer> balancer;
  };

  using BalancerMap =
      std::map<std::pair<ServicePortName, bool>, BalancerState>;  // (port, external)

  // One open listener: the service port it serves and the sockets it holds.
  struct Open {
    std::string service;
    size_t sockets = 1;
  };

  DataPath(const Options& options, vip::VipManager& vips, proxy::DataPathMetrics& metrics);
  // The balancer for one side of `info`, recorded in `next`; keeps the one in balancers_ if its
  // endpoints and affinity are unchanged.
  std::shared_ptr<proxy::Balancer> BalancerFor(const ServicePortInfo& info, bool external,
                                               BalancerMap& next);
  // Opens the sockets of `key` and hands them to the workers; returns how many it opened.
  absl::StatusOr<size_t> OpenListener(const proxy::ListenKey& key);
  void CloseListener(const proxy::ListenKey& key, const Open& open);
  // Opens `key` for `service` into open_ (at `hint`), or records in failed_ why it could not;
  // returns whether it opened.
  bool Listen(std::map<proxy::ListenKey, Open>::iterator hint, const proxy::ListenKey& key,
              const std::string& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Listeners `info` needs: addresses whose side of the port has endpoints.
  size_t ListenerCount(const ServicePortInfo& info);
  // Records an admission's outcome: logs newly skipped Services, sets the gauge.
  void Admitted(ListenerAdmission admission);
  // A listener of `service` failed to open: logged when it starts failing, counted.
  void ListenFailed(const proxy::ListenKey& key, const std::string& service,
                    const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True if a service of `infos` is skipped now or would be over its cap in `table`.
  bool CapsInvolved(const std::vector<const ServicePortInfo*>& infos, const ServiceTable& table);
  // The NodePort addresses, read once per full sync.
  const std::vector<net::IpAddress>& NodeIps();
  // Every node address that is not loopback, read once per full sync: kube-proxy lets the node
  // reach a LoadBalancer IP guarded by source ranges when a range holds the node's IP.
  const std::vector<net::IpAddress>& OwnIps();
  // The source filter of a listener: null but for a LoadBalancer IP whose service has source
  // ranges of its family.
  std::shared_ptr<const proxy::SourceFilter> FiltersFor(const ServicePortInfo& info,
                                                        const net::IpAddress& ip, int port);
  // Records why `info` is not served, when it is not (logged once); ForgetUnserved drops the
  // ports `table` no longer has. Both keep the metric.
  void NoteUnserved(const ServicePortInfo& info);
  static constexpr char kSctpUnserved[] = "no sluice data path serves SCTP";
  void ForgetUnserved(const ServiceTable& table);
  // Calls fn(ip, port, external) for every address `info` listens on when it has endpoints.
  template <typename Fn>
  void ForEachListener(const ServicePortInfo& info, Fn&& fn);
  static proxy::ListenKey KeyFor(const ServicePortInfo& info, const net::IpAddress& ip, int port);
  // The listen keys `info` routes (its listeners with endpoints behind them), in order.
  std::vector<proxy::ListenKey> RoutedKeys(const ServicePortInfo& info);
  // Adds the route of one listener (none without endpoints). False if another port holds it.
  bool AddRoute(proxy::RouteTable& routes, const ServicePortInfo& info, const net::IpAddress& ip,
                int port, bool external, BalancerMap& next);
  // The routes for `table`; replaces balancers_ with the balancers they use. Where two ports
  // claim one listener, the first in table order keeps it.
  std::shared_ptr<const proxy::RouteTable> BuildRoutes(const ServiceTable& table);
  // The routes for `next` made from routes_ (built for `prev`) by redoing only `changes`;
  // nullptr where that cannot give BuildRoutes' answer (claims conflict, caps).
  // Appends the listen addresses of the changed ports to `keys`.
  std::shared_ptr<const proxy::RouteTable> PatchRoutes(const ServiceTable& prev,
                                                       const ServiceTable& next,
                                                       std::span<const PortChange> changes,
                                                       std::vector<proxy::ListenKey>& keys);
  // Calls fn(ip) for every service address of `info` (made local even without endpoints).
  template <typename Fn>
  static void ForEachVip(const ServicePortInfo& info, Fn&& fn);
  // Makes every service address of `table` local, plus those of removed listeners still
  // carrying connections (forgetting the drained ones): a full sync.
  absl::Status ReconcileVips(const ServiceTable& table, const proxy::RouteTable& routes);
  // The same for a delta: adds and removes only the addresses whose use `changes` started or
  // ended, and those of listeners that drained since. `keys` (sorted) are the listen addresses
  // of the changed ports.
  absl::Status UpdateVips(std::span<const PortChange> changes, const proxy::RouteTable& routes,
                          const std::vector<proxy::ListenKey>& keys);
  // Opens the listeners of `routes` that are not open (again those that failed before) and
  // closes those it no longer has, appending them to `closed`; they stay in open_ until the
  // caller erases them. A listener that fails to open goes to failed_; the others open. With
  // `keys` (sorted), only those addresses and the failed ones are looked at. Returns whether
  // it posted anything to the workers.
  bool SyncListeners(const proxy::RouteTable& routes, const std::vector<proxy::ListenKey>* keys,
                     std::vector<proxy::ListenKey>& closed);

  const Options options_;
  vip::VipManager& vips_;
  proxy::DataPathMetrics& metrics_;
  proxy::FdBudget fds_;  // before workers_: they use it
  std::vector<std::unique_ptr<proxy::Worker>> workers_;
  size_t group_sockets_ = 0;  // sockets of per-worker reuseport groups
  size_t sockets_ = 0;        // every listening socket
  size_t udp_turn_ = 0;       // the worker the next UDP listener goes to
  // Services admitted by the last admission, and its skipped ports (service port -> reason).
  absl::flat_hash_set<config::NamespacedName> admitted_;
  absl::flat_hash_map<config::NamespacedName, std::string> skipped_services_;  // -> reason
  std::shared_ptr<const ServiceTable> applied_;      // the table of the last Apply
  std::shared_ptr<const proxy::RouteTable> routes_;  // built from applied_
  bool conflicts_ = false;  // two ports claimed one listener in the last BuildRoutes
  std::optional<std::vector<net::IpAddress>> node_ips_;  // NodeIps(), until the next full sync
  std::optional<std::vector<net::IpAddress>> own_ips_;   // OwnIps(), likewise
  // Open-connection counters by listener, kept across syncs; a removed listener's counter stays
  // (and its VIP on the node) until its connections have closed.
  std::map<proxy::ListenKey, std::shared_ptr<std::atomic<int64_t>>> active_;
  // Of active_, the listeners no longer routed whose connections hold their VIP.
  std::set<proxy::ListenKey> draining_;
  // Service ports using each service address in applied_: the address goes when none does.
  absl::flat_hash_map<net::IpAddress, int> vip_refs_;
  BalancerMap balancers_;

  mutable absl::Mutex mu_;
  // Written by the control plane, read by Listeners() and Unserved().
  std::map<proxy::ListenKey, Open> open_ ABSL_GUARDED_BY(mu_);
  std::map<proxy::ListenKey, std::pair<std::string, std::string>> failed_
      ABSL_GUARDED_BY(mu_);  // listener -> (service port, error)
  // Service port -> why it is over a listener cap, from the last admission.
  std::map<std::string, std::string> skipped_ ABSL_GUARDED_BY(mu_);
  // SCTP service ports, which no path serves; written by the control plane.
  std::set<ServicePortName> sctp_ ABSL_GUARDED_BY(mu_);
};

// Whether NodePorts are served on the local address `ip`: in `cidrs` (any when empty), not
// IPv6 link-local, not in `exclude` (our VIPs).
bool IsNodePortAddress(const net::IpAddress& ip, const std::vector<net::Cidr>& cidrs,
                       const absl::flat_hash_set<net::IpAddress>& exclude);

// Calls `fn` with each IP address of this thread's network namespace, its interface's name and
// flags (IFF_*). Logs and calls nothing when the addresses cannot be read.
void ForEachLocalAddress(
    absl::FunctionRef<void(const char* ifname, unsigned flags, const net::IpAddress& ip)> fn);

// The node's addresses that NodePorts listen on (IsNodePortAddress), sorted.
std::vector<net::IpAddress> NodeAddresses(const std::vector<net::Cidr>& cidrs,
                                          const absl::flat_hash_set<net::IpAddress>& exclude);

}  // namespace sluice::proxier
