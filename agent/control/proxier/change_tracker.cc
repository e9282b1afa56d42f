// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/change_tracker.h"

#include "lib/base/strings.h"

namespace sluice::proxier {

ChangeTracker::ChangeTracker(base::Clock& clock, absl::AnyInvocable<void()> on_change)
    : clock_(clock), started_(clock.Now()), on_change_(std::move(on_change)) {}

template <typename T>
void ChangeTracker::Record(ChangeMap<T>& map, const std::shared_ptr<const T>& prev,
                           const std::shared_ptr<const T>& cur) {
  const config::NamespacedName& id = (cur ? cur : prev)->meta.id;
  auto [it, inserted] = map.try_emplace(id, prev, cur);
  if (!inserted) {
    it->second.second = cur;  // keep the synced `first`, move `second` on
  }
  const auto& [was, now] = it->second;
  if (was == now || (was && now && *was == *now)) {
    map.erase(it);
  }
}

void ChangeTracker::Recorded() {
  if (oldest_ == absl::InfiniteFuture() && !pending_.empty()) {
    oldest_ = clock_.Now();
  } else if (pending_.empty()) {
    oldest_ = absl::InfiniteFuture();
  }
}

void ChangeTracker::OnServiceUpdate(const config::ServicePtr& prev, const config::ServicePtr& cur) {
  {
    absl::MutexLock lock(&mu_);
    ++service_total_;
    Record(Recording().services, prev, cur);
    Recorded();
    if (batch_depth_ > 0) {
      return;
    }
  }
  on_change_();
}

void ChangeTracker::OnEndpointSliceUpdate(const config::EndpointSlicePtr& prev,
                                          const config::EndpointSlicePtr& cur) {
  {
    absl::MutexLock lock(&mu_);
    ++slice_total_;
    Changes& changes = Recording();
    Record(changes.slices, prev, cur);
    Recorded();
    if (cur) {
      auto it = cur->meta.annotations.find(config::kLastChangeTriggerTimeAnnotation);
      absl::Time t;
      std::string err;
      if (it != cur->meta.annotations.end() &&
          absl::ParseTime(absl::RFC3339_full, base::Absl(it->second), &t, &err) && t >= started_) {
        changes.trigger_times.push_back(t);
      }
    }
    if (batch_depth_ > 0) {
      return;
    }
  }
  on_change_();
}

void ChangeTracker::OnServicesSynced() {
  {
    absl::MutexLock lock(&mu_);
    (batch_depth_ > 0 ? batch_services_synced_ : services_synced_) = true;
  }
  on_change_();
}

void ChangeTracker::OnEndpointSlicesSynced() {
  {
    absl::MutexLock lock(&mu_);
    (batch_depth_ > 0 ? batch_slices_synced_ : slices_synced_) = true;
  }
  on_change_();
}

void ChangeTracker::OnBatchBegin() {
  absl::MutexLock lock(&mu_);
  ++batch_depth_;
}

void ChangeTracker::OnBatchEnd() {
  {
    absl::MutexLock lock(&mu_);
    if (--batch_depth_ > 0) {
      return;
    }
    if (pending_.empty() && pending_.trigger_times.empty()) {
      pending_ = std::exchange(batch_, Changes{});  // a first list: 20,000 objects, not copied
    } else {
      // Each object's change over the batch, on top of what is pending (as if recorded there).
      for (const auto& [id, change] : batch_.services) {
        Record(pending_.services, change.first, change.second);
      }
      for (const auto& [id, change] : batch_.slices) {
        Record(pending_.slices, change.first, change.second);
      }
      pending_.trigger_times.insert(pending_.trigger_times.end(), batch_.trigger_times.begin(),
                                    batch_.trigger_times.end());
      batch_ = Changes{};
    }
    services_synced_ = services_synced_ || std::exchange(batch_services_synced_, false);
    slices_synced_ = slices_synced_ || std::exchange(batch_slices_synced_, false);
    Recorded();
  }
  on_change_();
}

Changes ChangeTracker::Take() {
  absl::MutexLock lock(&mu_);
  oldest_ = absl::InfiniteFuture();
  return std::exchange(pending_, Changes{});
}

bool ChangeTracker::Synced() const {
  absl::MutexLock lock(&mu_);
  return services_synced_ && slices_synced_;
}

size_t ChangeTracker::PendingServices() const {
  absl::MutexLock lock(&mu_);
  return pending_.services.size();
}

size_t ChangeTracker::PendingSlices() const {
  absl::MutexLock lock(&mu_);
  return pending_.slices.size();
}

absl::Time ChangeTracker::OldestPending() const {
  absl::MutexLock lock(&mu_);
  return oldest_;
}

uint64_t ChangeTracker::ServiceChangesTotal() const {
  absl::MutexLock lock(&mu_);
  return service_total_;
}

uint64_t ChangeTracker::SliceChangesTotal() const {
  absl::MutexLock lock(&mu_);
  return slice_total_;
}

}  // namespace sluice::proxier
