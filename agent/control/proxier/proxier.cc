// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/proxier.h"

#include <algorithm>
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
    slices_[OwnerOf(*cur)][cur->meta.id.name] = cur;
    dirty->push_back(OwnerOf(*cur));
  }
}

void Proxier::Rebuild(const config::NamespacedName& id) {
  if (auto old = built_.find(id); old != built_.end()) {
    for (const auto& e : old->second) {
      if (auto it = ports_.find(e->name); it != ports_.end() && it->second == e) {
        ports_.erase(it);
      }
    }
  }
  auto svc = services_.find(id);
  if (svc == services_.end() || !ShouldProgram(*svc->second, node_)) {
    built_.erase(id);
    return;
  }
  std::vector<config::EndpointSlicePtr> slices;
  if (auto it = slices_.find(id); it != slices_.end()) {
    for (const auto& [name, slice] : it->second) {
      slices.push_back(slice);
    }
  }
  auto& entries = built_[id];
  entries = BuildServicePorts(*svc->second, slices, node_);
  for (const auto& e : entries) {
    ports_.emplace(e->name, e);
  }
}

size_t Proxier::ApplyChanges(const Changes& changes) {
  std::vector<config::NamespacedName> dirty;
  for (const auto& [id, change] : changes.services) {
    if (change.second) {
      services_[id] = change.second;
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
    Rebuild(id);
  }
  return dirty.size();
}

std::shared_ptr<const ServiceTable> Proxier::BuildTable() const {
  // A copy of ports_: allocations, but none of the key comparisons of assembling it anew.
  return std::make_shared<const ServiceTable>(ports_);
}

absl::StatusOr<bool> Proxier::Sync() {
  if (!tracker_.Synced()) {
    VLOG(2) << "sync: waiting for every source's initial state";
    return false;
  }
  const absl::Time start = clock_.Now();
  Changes changes = tracker_.Take();
  std::shared_ptr<const ServiceTable> table;
  size_t rebuilt = 0;
  if (changes.empty() && !rebuild_all_ && LastSync() != absl::InfinitePast()) {
    // A periodic sync: nothing changed, but consumers re-apply the table, which repairs drift
    // (a VIP removed by hand, a new node address for NodePorts) and releases drained VIPs.
    table = this->table();
  } else {
    rebuilt = ApplyChanges(changes);
    if (std::exchange(rebuild_all_, false)) {
      for (const auto& [id, svc] : services_) {
        Rebuild(id);
      }
      rebuilt = services_.size();
    }
    table = BuildTable();
  }

  absl::Status result;
  for (const Consumer& c : consumers_) {
    if (absl::Status st = c.consumer->Apply(table); !st.ok()) {
      LOG(ERROR) << "sync: " << st;
      result.Update(st);
    }
    c.applied->Observe(absl::ToDoubleSeconds(clock_.Now() - start));
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
  VLOG(1) << "sync: " << rebuilt << " services rebuilt, " << table->ports().size()
          << " service ports in " << absl::FormatDuration(end - start);
  return true;
}

void Proxier::AddConsumer(TableConsumer* consumer, const std::string& name) {
  consumers_.push_back({consumer, &consumer_applied_.WithLabels({name})});
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
