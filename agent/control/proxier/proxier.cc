// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/proxier.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "lib/base/log.h"

namespace sluice::proxier {

namespace {

config::NamespacedName OwnerOf(const config::EndpointSlice& slice) {
  return {slice.meta.id.ns, slice.service_name};
}

// kube-proxy's buckets for programming latency run from 250 ms to 30 min; ours start lower
// because a local proxy programs in milliseconds.
std::vector<double> ProgrammingBuckets() { return base::ExponentialBuckets(0.001, 2, 22); }

}  // namespace

Proxier::Proxier(ChangeTracker& tracker, NodeInfo node, base::Clock& clock, base::Registry& metrics)
    : tracker_(tracker),
      node_(std::move(node)),
      clock_(clock),
      sync_duration_(metrics
                         .AddHistogram("kubeproxy_sync_proxy_rules_duration_seconds",
                                       "SyncProxyRules latency in seconds",
                                       base::ExponentialBuckets(0.0001, 2, 18))
                         .Get()),
      programming_duration_(metrics
                                .AddHistogram("kubeproxy_network_programming_duration_seconds",
                                              "In Cluster Network Programming Latency in seconds",
                                              ProgrammingBuckets())
                                .Get()),
      consumer_applied_(metrics.AddHistogram(
          "sluice_sync_consumer_applied_seconds",
          "Seconds from the start of a sync until a data path (proxy, socket-lb) has applied it",
          base::ExponentialBuckets(0.0001, 2, 18), {"consumer"})),
      last_sync_timestamp_(metrics
                               .AddGauge("kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                                         "The last time proxy rules were successfully synced")
                               .Get()),
      table_(std::make_shared<ServiceTable>()) {}

void Proxier::ApplySliceChange(const config::EndpointSlicePtr& prev,
                               const config::EndpointSlicePtr& cur,
                               std::vector<config::NamespacedName>* dirty) {
  if (prev) {
    auto owner = OwnerOf(*prev);
    auto it = slices_.find(owner);
    if (it != slices_.end()) {
      it->second.erase(prev->meta.id.name);
      if (it->second.empty()) {
        slices_.erase(it);
      }
    }
    dirty->push_back(owner);
  }
  // Headless slices are never programmed; a slice may arrive before its Service: keep it.
  if (cur && !cur->meta.labels.contains(config::kHeadlessLabel)) {
    config::NamespacedName owner = OwnerOf(*cur);
    // Slices come in name order, which mostly is their services' order: end() as for Services.
    slices_.try_emplace(slices_.end(), owner)->second.insert_or_assign(cur->meta.id.name, cur);
    dirty->push_back(std::move(owner));
  }
}

void Proxier::Rebuild(const config::NamespacedName& id, std::vector<ServicePortName>& touched) {
  std::map<ServicePortName, ServicePortInfoPtr> old;
  // One lookup, and the insert below at its place (a cold start builds 10,000 services).
  auto at = built_.lower_bound(id);
  if (at != built_.end() && at->first == id) {
    for (const auto& e : at->second) {
      touched.push_back(e->name);
      if (auto p = ports_.find(e->name); p != ports_.end() && p->second == e) {
        ports_.erase(e->name);
      }
      old.emplace(e->name, e);
    }
    at = built_.erase(at);
  }
  auto svc = services_.find(id);
  if (svc == services_.end() || !ShouldProgram(*svc->second, node_)) {
    return;
  }
  std::vector<config::EndpointSlicePtr> slices;
  if (auto it = slices_.find(id); it != slices_.end()) {
    for (const auto& [name, slice] : it->second) {
      slices.push_back(slice);
    }
  }
  auto& entries =
      built_.emplace_hint(at, id, BuildServicePorts(*svc->second, slices, node_))->second;
  for (auto& e : entries) {
    // Consumers redo a port only when its object changed: a port the change left as it was
    // (another port's endpoints, an annotation) keeps its object and is no change.
    if (auto o = old.find(e->name); o != old.end() && *o->second == *e) {
      e = o->second;
    }
    touched.push_back(e->name);
    ports_.emplace(e->name, e);
  }
}

size_t Proxier::ApplyChanges(const Changes& changes, std::vector<ServicePortName>& touched) {
  std::vector<config::NamespacedName> dirty;
  for (const auto& [id, change] : changes.services) {
    if (change.second) {
      // Changes come in name order: past the last name (a cold start), end() is the place.
      services_.insert_or_assign(services_.end(), id, change.second);
    } else {
      services_.erase(id);
    }
    dirty.push_back(id);
  }
  for (const auto& [id, change] : changes.slices) {
    ApplySliceChange(change.first, change.second, &dirty);
  }
  std::sort(dirty.begin(), dirty.end());
  dirty.erase(std::unique(dirty.begin(), dirty.end()), dirty.end());
  for (const auto& id : dirty) {
    Rebuild(id, touched);
  }
  return dirty.size();
}

std::vector<PortChange> Proxier::Delta(const ServiceTable& prev,
                                       std::vector<ServicePortName>& touched) const {
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  std::vector<PortChange> delta;
  for (ServicePortName& name : touched) {
    ServicePortInfoPtr was = prev.Get(name);
    auto now = ports_.find(name);
    ServicePortInfoPtr is = now == ports_.end() ? nullptr : now->second;
    if (was != is) {
      delta.push_back({std::move(name), std::move(was), std::move(is)});
    }
  }
  return delta;
}

absl::StatusOr<bool> Proxier::Sync() {
  if (!tracker_.Synced()) {
    VLOG(2) << "sync: waiting for every source's initial state";
    return false;
  }
  const absl::Time start = clock_.Now();
  Changes changes = tracker_.Take();
  std::shared_ptr<const ServiceTable> prev = this->table();
  std::shared_ptr<const ServiceTable> table;
  std::vector<PortChange> delta;
  size_t rebuilt = 0;
  // A periodic sync: nothing changed, but consumers re-apply the table in full, which repairs
  // drift (a VIP removed by hand, a new node address for NodePorts) and releases drained VIPs.
  const bool periodic = changes.empty() && !rebuild_all_ && LastSync() != absl::InfinitePast();
  if (periodic) {
    table = prev;
  } else {
    std::vector<ServicePortName> touched;
    rebuilt = ApplyChanges(changes, touched);
    if (std::exchange(rebuild_all_, false)) {
      for (const auto& [id, svc] : services_) {
        Rebuild(id, touched);
      }
      rebuilt = services_.size();
    }
    // A copy of ports_ shares its chunks: it costs a pointer per 64 ports.
    table = std::make_shared<const ServiceTable>(ports_);
    delta = Delta(*prev, touched);
  }

  absl::Status result;
  for (size_t first = 0; first < consumers_.size();) {
    // One step: a kAfter consumer and the kBeside ones after it.
    size_t end = first + 1;
    while (end < consumers_.size() && consumers_[end].order == Order::kBeside) {
      ++end;
    }
    // Decided before any thread starts: a consumer's thread updates its syncs and failed.
    std::vector<TableDelta> updates;
    for (size_t i = first; i < end; ++i) {
      const Consumer& c = consumers_[i];
      updates.push_back(
          {.table = table, .changes = delta, .full = periodic || c.syncs < 2 || c.failed});
    }
    // The step's first consumer runs here: a kBeside one added first has none to run beside.
    auto beside = [&](size_t i) {
      return i > first && consumers_[i].order == Order::kBeside && updates[i - first].full;
    };
    std::vector<std::thread> threads;
    for (size_t i = first; i < end; ++i) {
      if (beside(i)) {
        threads.emplace_back(
            [this, &c = consumers_[i], &u = updates[i - first], start] { ApplyTo(c, u, start); });
      }
    }
    for (size_t i = first; i < end; ++i) {
      if (!beside(i)) {
        ApplyTo(consumers_[i], updates[i - first], start);
      }
    }
    for (std::thread& t : threads) {
      t.join();
    }
    for (size_t i = first; i < end; ++i) {
      result.Update(consumers_[i].status);
    }
    first = end;
  }
  {
    // Published once applied (even in part: a failed sync retries this table), so what
    // /debug/services shows is in the kernel.
    absl::MutexLock lock(&mu_);
    table_ = table;
  }
  const absl::Time end = clock_.Now();
  sync_duration_.Observe(absl::ToDoubleSeconds(end - start));
  if (!result.ok()) {
    return result;
  }
  for (absl::Time t : changes.trigger_times) {
    programming_duration_.Observe(std::max(0.0, absl::ToDoubleSeconds(end - t)));
  }
  absl::MutexLock lock(&mu_);
  last_sync_ = end;
  last_sync_timestamp_.Set(absl::ToDoubleSeconds(end - absl::UnixEpoch()));
  VLOG(1) << "sync: " << rebuilt << " services rebuilt, " << delta.size() << " of "
          << table->ports().size() << " service ports changed, in "
          << absl::FormatDuration(end - start);
  return true;
}

void Proxier::ApplyTo(Consumer& c, const TableDelta& update, absl::Time start) {
  c.status = c.consumer->Apply(update);
  ++c.syncs;
  c.failed = !c.status.ok();
  if (!c.status.ok()) {
    LOG(ERROR) << "sync: " << c.status;
  }
  c.applied->Observe(absl::ToDoubleSeconds(clock_.Now() - start));
}

void Proxier::AddConsumer(TableConsumer* consumer, const std::string& name, Order order) {
  consumers_.push_back({consumer, &consumer_applied_.WithLabels({name}), order});
}

void Proxier::SetZone(const std::string& zone) {
  if (node_.zone != zone) {
    node_.zone = zone;
    rebuild_all_ = true;
  }
}

std::shared_ptr<const ServiceTable> Proxier::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::Time Proxier::LastSync() const {
  absl::MutexLock lock(&mu_);
  return last_sync_;
}

}  // namespace sluice::proxier
