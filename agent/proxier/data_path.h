// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "agent/net/address.h"
#include "agent/proxier/proxier.h"
#include "agent/proxy/data_path_metrics.h"
#include "agent/proxy/route_table.h"
#include "agent/proxy/worker.h"
#include "agent/vip/vip_manager.h"

namespace sluice::fastpath {
class ReuseportBalancer;
}  // namespace sluice::fastpath

namespace sluice::proxier {

// The userspace proxy as a TableConsumer: for each service port it makes the service addresses
// local (VipManager), opens one SO_REUSEPORT socket per worker on every address that has
// endpoints (ClusterIPs, external and LoadBalancer IPs, NodePorts on node addresses), and
// posts the routes to the workers. A port without usable endpoints has no listener, so the
// kernel refuses its clients at once (TCP RST, ICMP port unreachable).
// Thread: control plane; Listeners() is thread-safe.
class DataPath final : public TableConsumer {
 public:
  struct Options {
    int workers = 1;
    proxy::Worker::Options worker;
    std::vector<net::Cidr> nodeport_cidrs;  // node addresses for NodePorts; empty = all
    int backlog = 4096;
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
  absl::Status Apply(const std::shared_ptr<const ServiceTable>& table) override;

  // Every worker's open TCP connections, for /debug/connections. Thread-safe (the admin thread
  // calls it); waits briefly for each worker loop.
  std::vector<proxy::ConnectionInfo> Connections() const;

  // Open listeners ("tcp/10.96.0.10:80") by service port, for /debug/services. A removed one
  // is listed until Apply returns: once it is gone from here, its clients are refused.
  std::map<std::string, std::vector<std::string>> Listeners() const ABSL_LOCKS_EXCLUDED(mu_);
  // Service ports the proxy does not serve ("ns/name:port" -> why), for /debug/services.
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

  DataPath(const Options& options, vip::VipManager& vips, proxy::DataPathMetrics& metrics);
  // The balancer for one side of `info`, recorded in `next`; keeps the one in balancers_ if its
  // endpoints and affinity are unchanged.
  std::shared_ptr<proxy::Balancer> BalancerFor(const ServicePortInfo& info, bool external,
                                               BalancerMap& next);
  absl::Status OpenListener(const proxy::ListenKey& key);
  // The NodePort addresses, read once per full sync.
  const std::vector<net::IpAddress>& NodeIps();
  // Every node address that is not loopback, read once per full sync: kube-proxy lets the node
  // reach a LoadBalancer IP guarded by source ranges when a range holds the node's IP.
  const std::vector<net::IpAddress>& OwnIps();
  // The source filter of a listener: null but for a LoadBalancer IP whose service has source
  // ranges of its family.
  std::shared_ptr<const proxy::SourceFilter> FiltersFor(const ServicePortInfo& info,
                                                        const net::IpAddress& ip, int port);
  // Records (`add`) or forgets why `info` is not served, when it is not; updates the metric.
  void TrackUnserved(const ServicePortInfo& info, bool add);
  // Calls fn(ip, port, external) for every address `info` listens on when it has endpoints.
  template <typename Fn>
  void ForEachListener(const ServicePortInfo& info, Fn&& fn);
  static proxy::ListenKey KeyFor(const ServicePortInfo& info, const net::IpAddress& ip, int port);
  // Adds the route of one listener (none without endpoints). False if another port holds it.
  bool AddRoute(proxy::RouteTable& routes, const ServicePortInfo& info, const net::IpAddress& ip,
                int port, bool external, BalancerMap& next);
  // The routes for `table`; replaces balancers_ with the balancers they use. Where two ports
  // claim one listener, the first in table order keeps it.
  std::shared_ptr<const proxy::RouteTable> BuildRoutes(const ServiceTable& table);
  // The routes for `next` made from routes_ (built for `prev`) by redoing only the ports that
  // changed; nullptr where that cannot give BuildRoutes' answer (claims conflict).
  std::shared_ptr<const proxy::RouteTable> PatchRoutes(const ServiceTable& prev,
                                                       const ServiceTable& next);
  // Every service address of `table`, plus those of removed listeners still carrying
  // connections (forgetting the drained ones).
  absl::flat_hash_set<net::IpAddress> WantedVips(const ServiceTable& table,
                                                 const proxy::RouteTable& routes);
  // Opens the listeners of `routes` that are not open and closes those it no longer has,
  // appending them to `closed`; they stay in open_ until the caller erases them.
  absl::Status SyncListeners(const proxy::RouteTable& routes,
                             std::vector<proxy::ListenKey>& closed);

  const Options options_;
  vip::VipManager& vips_;
  std::vector<std::unique_ptr<proxy::Worker>> workers_;
  std::shared_ptr<const ServiceTable> applied_;      // the table of the last Apply
  std::shared_ptr<const proxy::RouteTable> routes_;  // built from applied_
  bool full_next_ = true;                            // the next Apply is a full sync
  bool conflicts_ = false;  // two ports claimed one listener in the last BuildRoutes
  std::optional<std::vector<net::IpAddress>> node_ips_;  // NodeIps(), until the next full sync
  std::optional<std::vector<net::IpAddress>> own_ips_;   // OwnIps(), likewise
  proxy::DataPathMetrics& metrics_;
  // Open-connection counters by listener, kept across syncs; a removed listener's counter stays
  // (and its VIP on the node) until its connections have closed.
  std::map<proxy::ListenKey, std::shared_ptr<std::atomic<int64_t>>> active_;
  BalancerMap balancers_;

  mutable absl::Mutex mu_;
  // listener -> service port; written by the control plane, read by Listeners().
  std::map<proxy::ListenKey, std::string> open_ ABSL_GUARDED_BY(mu_);
  // service port -> why it has no listener; written by the control plane.
  std::map<std::string, std::string> unserved_ ABSL_GUARDED_BY(mu_);
};

// The node's addresses that NodePorts listen on: every local address in `cidrs` (all when
// empty), without IPv6 link-local ones and without `exclude` (our VIPs).
std::vector<net::IpAddress> NodeAddresses(const std::vector<net::Cidr>& cidrs,
                                          const absl::flat_hash_set<net::IpAddress>& exclude);

}  // namespace sluice::proxier
