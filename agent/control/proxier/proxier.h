// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"

#include "agent/control/proxier/change_tracker.h"
#include "agent/control/proxier/service_table.h"

namespace sluice::proxier {

// Receives each new table after a sync (the data path, the VIP manager). Thread: control plane.
class TableConsumer {
 public:
  virtual ~TableConsumer() = default;
  // Makes the kernel state match `table`. An error makes the sync retry.
  virtual absl::Status Apply(const std::shared_ptr<const ServiceTable>& table) = 0;
};

// Turns recorded changes into a new ServiceTable: rebuilds only the services whose Service or
// EndpointSlices changed, hands the table to the consumers, then publishes it.
// Thread: control plane (Sync); table() and LastSync() are thread-safe.
class Proxier final {
 public:
  Proxier(ChangeTracker& tracker, NodeInfo node, base::Clock& clock, base::Registry& metrics);

  // Consumers apply each table in the order added; `name` labels
  // sluice_sync_consumer_applied_seconds.
  void AddConsumer(TableConsumer* consumer, const std::string& name);

  // Applies every pending change; returns true. Does nothing and returns false until every
  // source has synced once, so a half-loaded view never removes what is serving.
  absl::StatusOr<bool> Sync();

  // Sets this node's zone (from the Node's topology label when --zone is not given). Topology
  // hints select endpoints by zone, so every service is rebuilt at the next Sync.
  void SetZone(const std::string& zone);

  // The table the consumers last applied.
  std::shared_ptr<const ServiceTable> table() const ABSL_LOCKS_EXCLUDED(mu_);
  // When the last successful sync ended; InfinitePast before the first.
  absl::Time LastSync() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Applies recorded changes to services_/slices_ and rebuilds the affected services; returns
  // how many were rebuilt.
  size_t ApplyChanges(const Changes& changes);
  // A table of ports_.
  std::shared_ptr<const ServiceTable> BuildTable() const;
  // Rebuilds `id`'s entries from services_ and slices_.
  void Rebuild(const config::NamespacedName& id);
  void ApplySliceChange(const config::EndpointSlicePtr& prev, const config::EndpointSlicePtr& cur,
                        std::vector<config::NamespacedName>* dirty);

  ChangeTracker& tracker_;
  NodeInfo node_;
  bool rebuild_all_ = false;  // the node's zone changed
  base::Clock& clock_;
  struct Consumer {
    TableConsumer* consumer;
    base::Histogram* applied;  // seconds from the sync's start to this consumer's end
  };
  std::vector<Consumer> consumers_;

  std::map<config::NamespacedName, config::ServicePtr> services_;
  // Slices by the service they belong to (namespace + kubernetes.io/service-name), then by name.
  std::map<config::NamespacedName, std::map<std::string, config::EndpointSlicePtr>> slices_;
  std::map<config::NamespacedName, std::vector<ServicePortInfoPtr>> built_;
  std::map<ServicePortName, ServicePortInfoPtr>
      ports_;  // built_'s entries by name, kept by Rebuild

  base::Histogram& sync_duration_;
  base::Histogram& programming_duration_;
  base::Family<base::Histogram>& consumer_applied_;
  base::Gauge& last_sync_timestamp_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const ServiceTable> table_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sync_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace sluice::proxier
