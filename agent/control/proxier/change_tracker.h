// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"

#include "agent/control/config/handler.h"

namespace sluice::proxier {

// What changed since the last Take(), collapsed per object: `first` is the object as it was at
// the last sync (nullptr = absent), `second` as it is now. add+delete leaves nothing;
// delete+add becomes one update; a change back to the synced value disappears.
template <typename T>
using ChangeMap =
    std::map<config::NamespacedName, std::pair<std::shared_ptr<const T>, std::shared_ptr<const T>>>;

struct Changes {
  ChangeMap<config::Service> services;
  ChangeMap<config::EndpointSlice> slices;
  // endpoints.kubernetes.io/last-change-trigger-time of each slice added or updated since the
  // tracker started, for kubeproxy_network_programming_duration_seconds.
  std::vector<absl::Time> trigger_times;
  bool empty() const { return services.empty() && slices.empty(); }
};

// The handlers of the merged view: records changes, never acts on them ("handlers record, Sync
// acts"), and pokes the sync runner. What a batch records becomes pending only when the batch
// ends, so a sync takes all of it or none. Thread-safe; called by the mux under its lock.
class ChangeTracker final : public config::ServiceHandler,
                            public config::EndpointSliceHandler,
                            public config::BatchHandler {
 public:
  // `on_change` is called after each recorded change and on sync; it must only schedule work.
  ChangeTracker(base::Clock& clock, absl::AnyInvocable<void()> on_change);

  // config::ServiceHandler
  void OnServiceUpdate(const config::ServicePtr& prev, const config::ServicePtr& cur) override;
  void OnServicesSynced() override;
  // config::EndpointSliceHandler
  void OnEndpointSliceUpdate(const config::EndpointSlicePtr& prev,
                             const config::EndpointSlicePtr& cur) override;
  void OnEndpointSlicesSynced() override;
  // config::BatchHandler
  void OnBatchBegin() override;
  void OnBatchEnd() override;

  // Hands every pending change to the caller (the sync), leaving none pending.
  Changes Take() ABSL_LOCKS_EXCLUDED(mu_);
  bool Synced() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t PendingServices() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t PendingSlices() const ABSL_LOCKS_EXCLUDED(mu_);
  // When the oldest pending change was queued; InfiniteFuture when none is pending.
  absl::Time OldestPending() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t ServiceChangesTotal() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t SliceChangesTotal() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  template <typename T>
  void Record(ChangeMap<T>& map, const std::shared_ptr<const T>& prev,
              const std::shared_ptr<const T>& cur) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where changes go now: the open batch, or pending.
  Changes& Recording() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return batch_depth_ > 0 ? batch_ : pending_;
  }
  // After a change: keeps oldest_, and pokes the runner unless a batch is open.
  void Recorded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  base::Clock& clock_;
  // Trigger times before this are left out, as kube-proxy does: the first list replays
  // changes made while the agent was down, which would measure its downtime.
  const absl::Time started_;
  absl::AnyInvocable<void()> on_change_;
  mutable absl::Mutex mu_;
  Changes pending_ ABSL_GUARDED_BY(mu_);
  int batch_depth_ ABSL_GUARDED_BY(mu_) = 0;
  Changes batch_ ABSL_GUARDED_BY(mu_);  // of the open batch
  // "Synced" said during the open batch: it holds once the batch is pending.
  bool batch_services_synced_ ABSL_GUARDED_BY(mu_) = false;
  bool batch_slices_synced_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time oldest_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool services_synced_ ABSL_GUARDED_BY(mu_) = false;
  bool slices_synced_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t service_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slice_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::proxier
