// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/metrics.h"
#include "lib/http/status_server.h"

#include "agent/control/proxier/proxier.h"
#include "agent/control/proxier/service_table.h"

namespace sluice::admin {

// kube-proxy's ServicePortMap.HealthCheckNodePorts(): the health check node port of every
// service that has one (type LoadBalancer with externalTrafficPolicy Local).
std::map<config::NamespacedName, int> HealthCheckPorts(const proxier::ServiceTable& table);

// kube-proxy's EndpointsMap.LocalReadyEndpoints() for one service: the number of distinct IPs
// among its ready endpoints on node `node`, over all its ports (10.0.0.1:80 and 10.0.0.1:443
// are one endpoint), in the family that has more of them (kube-proxy's per-family proxiers
// each report their own, so a dual-stack pod is one endpoint). Terminating endpoints are not
// ready, so a node left with only those fails its health check.
int LocalReadyEndpoints(const proxier::ServiceTable& table, const config::NamespacedName& service,
                        const std::string& node);

// kube-proxy's answer on a health check node port: 200 when the service has a local ready
// endpoint and the proxy is healthy, else 503; the body byte for byte as kube-proxy writes it
// (a dedented template: tab-indented, no trailing newline), with Content-Type,
// X-Content-Type-Options and X-Load-Balancing-Endpoint-Weight (kubernetes#118999).
http::StatusServer::Reply ServiceHealthReply(const config::NamespacedName& service,
                                             int local_endpoints, bool proxy_healthy);

// kube-proxy's service health check servers: for every service with a health check node port,
// an HTTP server on that port of each node address, answering every path with
// ServiceHealthReply. A server opens when its service appears with a port, and closes when the
// service goes or its port changes (type or traffic policy changed: the port is then 0).
// A port that cannot be bound (another service's health check port, a NodePort listener) is
// logged with kube-proxy's event reason FailedToStartServiceHealthcheck, counted, and tried
// again at every later sync; the other services are not held up. Apply always succeeds, as
// kube-proxy's sync does not fail on it.
// Thread: control plane (Apply); the servers' threads read the endpoint counts under mu_.
class ServiceHealthServers final : public proxier::TableConsumer {
 public:
  struct Options {
    std::string node_name;
    // The addresses each server listens on, read when one opens; "" is every address (IPv4
    // and IPv6, as Go's listener on 0.0.0.0), kube-proxy's choice without --nodeport-addresses.
    std::function<std::vector<std::string>()> listen_hosts;
    // The proxy's health (ProxierHealthy, without the node's eligibility). Thread-safe.
    std::function<bool()> proxy_healthy;
    base::Registry* metrics = nullptr;  // optional
  };

  explicit ServiceHealthServers(Options options);
  ~ServiceHealthServers() override;
  ServiceHealthServers(const ServiceHealthServers&) = delete;
  ServiceHealthServers& operator=(const ServiceHealthServers&) = delete;

  // proxier::TableConsumer
  // Redoes only the services of the delta's changes (and those failing), unless it is full.
  absl::Status Apply(const proxier::TableDelta& delta) override;

  // The open servers' ports by service (the control plane's view after the last Apply).
  std::map<config::NamespacedName, int> OpenPorts() const;

 private:
  struct Instance {
    int port = 0;
    std::vector<std::unique_ptr<http::StatusServer>> servers;  // one per address
  };

  // Opens `port` on every address, or none (closing what opened) and returns the error.
  absl::StatusOr<Instance> Listen(const config::NamespacedName& service, int port);
  void ReportFailure(const config::NamespacedName& service, int port, const absl::Status& error);
  http::StatusServer::Reply Answer(const config::NamespacedName& service) const
      ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  base::Family<base::Counter>* failures_ = nullptr;
  std::map<config::NamespacedName, Instance> open_;
  // The last failure logged per service, so a port taken for hours logs once, not every sync.
  std::map<config::NamespacedName, std::string> failing_;

  mutable absl::Mutex mu_;
  std::map<config::NamespacedName, int> endpoints_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::admin
