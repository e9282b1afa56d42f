// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"

#include "agent/control/proxier/change_tracker.h"
#include "agent/control/proxier/service_table.h"

namespace sluice::proxier {

// What one sync hands a consumer: the new table, and what changed since the previous one.
struct TableDelta {
  std::shared_ptr<const ServiceTable> table;
  // The service ports added, changed or removed since the previous sync's table, in name
  // order, computed once for every consumer. A consumer that applied that table applies these.
  std::span<const PortChange> changes;
  // Make the whole state match `table` instead (`changes` may be left aside): the consumer's
  // first two syncs (the first one's VIP reconcile adopts or removes an earlier agent's
  // addresses, which node-address readers saw), the periodic resync (which repairs drift: a
  // VIP removed by hand, a new node address for NodePorts) and the sync after it failed.
  bool full = false;
};

// Receives each sync's delta (the proxy, socket LB, service health checks).
// Thread: control plane.
class TableConsumer {
 public:
  virtual ~TableConsumer() = default;
  // Makes the kernel state match `delta.table`, changing only `delta.changes` unless
  // `delta.full`. An error makes the sync retry, and this consumer's next delta full.
  virtual absl::Status Apply(const TableDelta& delta) = 0;
};

// Turns recorded changes into a new ServiceTable: rebuilds only the services whose Service or
// EndpointSlices changed, computes once which service ports that added, changed or removed,
// hands the table and that delta to the consumers, then publishes the table.
// Thread: control plane (Sync); table() and LastSync() are thread-safe.
class Proxier final {
 public:
  Proxier(ChangeTracker& tracker, NodeInfo node, base::Clock& clock, base::Registry& metrics);

  // Where a consumer applies a table against the one added before it.
  enum class Order {
    kAfter,
    // Its full deltas (the cold start's, a resync) are applied on a thread of their own while
    // the consumers before it, back to the last kAfter one, apply theirs (none before it: as
    // kAfter); the next kAfter consumer starts once all of them are done. For consumers that
    // program disjoint kernel state and each take hundreds of milliseconds for a full table
    // (socket LB and the eBPF NAT: their writes of ~100,000 backend slots each); a small delta
    // stays on the sync's thread, where it costs less than a thread's start.
    kBeside,
  };
  // Consumers apply each table in the order added; `name` labels
  // sluice_sync_consumer_applied_seconds. A kBeside consumer's Apply may run on another thread
  // than the sync's (never at the same time as its own); the others' run on the sync's.
  void AddConsumer(TableConsumer* consumer, const std::string& name, Order order = Order::kAfter);

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
  // how many were rebuilt. Appends the names of the ports they had or have to `touched`.
  size_t ApplyChanges(const Changes& changes, std::vector<ServicePortName>& touched);
  // Rebuilds `id`'s entries from services_ and slices_; a port equal to the one it replaces
  // keeps the old object. Appends the names of its old and new ports to `touched`.
  void Rebuild(const config::NamespacedName& id, std::vector<ServicePortName>& touched);
  // The ports of `touched` whose entry in ports_ is not the one in `prev`.
  std::vector<PortChange> Delta(const ServiceTable& prev,
                                std::vector<ServicePortName>& touched) const;
  void ApplySliceChange(const config::EndpointSlicePtr& prev, const config::EndpointSlicePtr& cur,
                        std::vector<config::NamespacedName>* dirty);

  ChangeTracker& tracker_;
  NodeInfo node_;
  bool rebuild_all_ = false;  // the node's zone changed
  base::Clock& clock_;
  struct Consumer {
    TableConsumer* consumer;
    base::Histogram* applied;  // seconds from the sync's start to this consumer's end
    Order order;
    int syncs = 0;        // deltas applied, failed or not
    bool failed = false;  // the last one failed: the next one is full
    absl::Status status;  // of the last delta
  };
  // Hands `c` its delta and records the outcome in `c`: on the sync's thread, or a kBeside
  // consumer's own.
  void ApplyTo(Consumer& c, const TableDelta& update, absl::Time start);
  std::vector<Consumer> consumers_;

  std::map<config::NamespacedName, config::ServicePtr> services_;
  // Slices by the service they belong to (namespace + kubernetes.io/service-name), then by name.
  std::map<config::NamespacedName, std::map<std::string, config::EndpointSlicePtr>> slices_;
  std::map<config::NamespacedName, std::vector<ServicePortInfoPtr>> built_;
  ServicePortMap ports_;  // built_'s entries by name, kept by Rebuild; tables are its copies

  base::Histogram& sync_duration_;
  base::Histogram& programming_duration_;
  base::Family<base::Histogram>& consumer_applied_;
  base::Gauge& last_sync_timestamp_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const ServiceTable> table_ ABSL_GUARDED_BY(mu_);
  absl::Time last_sync_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace sluice::proxier
