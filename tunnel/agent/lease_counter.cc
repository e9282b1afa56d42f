// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/lease_counter.h"

#include "lib/base/status.h"

namespace sluice::tunnel::agent {

absl::StatusOr<std::unique_ptr<LeaseCounter>> LeaseCounter::Create(const kube::ClientConfig& config,
                                                                   const std::string& name_space,
                                                                   const std::string& selector,
                                                                   const base::Clock& clock) {
  auto counter = std::unique_ptr<LeaseCounter>(new LeaseCounter(clock));
  ASSIGN_OR_RETURN(counter->token_, kube::BearerToken::Create(config.token, config.token_file));
  ASSIGN_OR_RETURN(
      counter->watcher_,
      kube::ListWatcher::Create(
          {.name = "leases", .path = wire::LeasesPath(name_space), .label_selector = selector},
          kube::ListWatchOptions{}, config, *counter->token_, *counter));
  counter->watcher_->Start();
  return counter;
}

LeaseCounter::~LeaseCounter() { watcher_.reset(); }

int LeaseCounter::Count() {
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  int valid = 0;
  for (const auto& [name, lease] : leases_) {
    valid += wire::LeaseValid(lease, now) ? 1 : 0;
  }
  if (valid == 0) {
    return fallback_;
  }
  fallback_ = valid;
  return valid;
}

void LeaseCounter::OnListBegin() {
  absl::MutexLock lock(&mu_);
  listing_.clear();
}

void LeaseCounter::OnListItem(const simdjson::dom::element& object) {
  auto lease = wire::ParseLease(object);
  if (!lease.ok()) {
    return;
  }
  absl::MutexLock lock(&mu_);
  listing_[lease->name] = std::move(*lease);
}

void LeaseCounter::OnListEnd() {
  absl::MutexLock lock(&mu_);
  leases_.swap(listing_);
  listing_.clear();
}

void LeaseCounter::OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) {
  auto lease = wire::ParseLease(object);
  if (!lease.ok()) {
    return;
  }
  absl::MutexLock lock(&mu_);
  if (type == kube::EventType::kDeleted) {
    leases_.erase(lease->name);
  } else {
    leases_[lease->name] = std::move(*lease);
  }
}

}  // namespace sluice::tunnel::agent
