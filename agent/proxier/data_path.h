// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
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
  };

  static absl::StatusOr<std::unique_ptr<DataPath>> Create(const Options& options,
                                                          vip::VipManager& vips,
                                                          proxy::DataPathMetrics& metrics);
  ~DataPath() override;

  // TableConsumer
  absl::Status Apply(const std::shared_ptr<const ServiceTable>& table) override;

  // Every worker's open TCP connections, for /debug/connections. Thread-safe (the admin thread
  // calls it); waits briefly for each worker loop.
  std::vector<proxy::ConnectionInfo> Connections() const;

  // Open listeners ("tcp/10.96.0.10:80") by service port, for /debug/services.
  std::map<std::string, std::vector<std::string>> Listeners() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct BalancerState {
    std::vector<net::SocketAddress> endpoints;
    bool affinity = false;
    absl::Duration timeout;
    std::shared_ptr<proxy::Balancer> balancer;
  };

  DataPath(const Options& options, vip::VipManager& vips);
  std::shared_ptr<proxy::Balancer> BalancerFor(
      const ServicePortInfo& info, bool external,
      std::map<std::pair<ServicePortName, bool>, BalancerState>& next);
  absl::Status OpenListener(const proxy::ListenKey& key);
  // The routes for `table`; replaces balancers_ with the balancers they use.
  std::shared_ptr<proxy::RouteTable> BuildRoutes(const ServiceTable& table);
  // Every service address of `table`, plus those of removed listeners still carrying
  // connections (forgetting the drained ones).
  absl::flat_hash_set<net::IpAddress> WantedVips(const ServiceTable& table,
                                                 const proxy::RouteTable& routes);

  const Options options_;
  vip::VipManager& vips_;
  std::vector<std::unique_ptr<proxy::Worker>> workers_;
  std::map<proxy::ListenKey, std::string> open_;  // listener -> service port
  // Open-connection counters by listener, kept across syncs; a removed listener's counter stays
  // (and its VIP on the node) until its connections have closed.
  std::map<proxy::ListenKey, std::shared_ptr<std::atomic<int64_t>>> active_;
  std::map<proxy::ListenKey, std::shared_ptr<proxy::ConnectionSizes>> sizes_;  // as active_
  std::map<std::pair<ServicePortName, bool>, BalancerState> balancers_;        // (port, external)

  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> listeners_view_ ABSL_GUARDED_BY(mu_);
};

// The node's addresses that NodePorts listen on: every local address in `cidrs` (all when
// empty), without IPv6 link-local ones and without `exclude` (our VIPs).
std::vector<net::IpAddress> NodeAddresses(const std::vector<net::Cidr>& cidrs,
                                          const absl::flat_hash_set<net::IpAddress>& exclude);

}  // namespace sluice::proxier
