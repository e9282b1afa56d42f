// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/base/clock.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/client_config.h"
#include "lib/kube/list_watch.h"

#include "tunnel/wire/lease.h"

namespace sluice::tunnel::agent {

// Upstream proxy-agent's --count-server-leases: how many proxy servers run, counted from the
// unexpired Leases that servers with --enable-lease-controller hold (--lease-namespace,
// --lease-label as the selector). Kept by a list and watch of the namespace's Leases (one watch
// per agent, as upstream's informer), so counting costs the API server nothing.
// Thread-safe; the watch runs on its own thread.
class LeaseCounter final : public kube::WatchHandler {
 public:
  static absl::StatusOr<std::unique_ptr<LeaseCounter>> Create(
      const kube::ClientConfig& config, const std::string& name_space, const std::string& selector,
      const base::Clock& clock = base::RealClock::Get());
  ~LeaseCounter() override;  // stops the watch

  // Leases valid now. None valid (or none seen yet): the last non-zero count, 0 before any,
  // as upstream's fallback.
  int Count() ABSL_LOCKS_EXCLUDED(mu_);

  // kube::WatchHandler (the watcher's thread)
  void OnListBegin() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnListItem(const simdjson::dom::element& object) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnListEnd() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWatchEvent(kube::EventType type, const simdjson::dom::element& object) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void OnBookmark() override {}
  void OnError(std::string_view) override {}

 private:
  explicit LeaseCounter(const base::Clock& clock) : clock_(clock) {}

  const base::Clock& clock_;
  std::unique_ptr<kube::BearerToken> token_;
  absl::Mutex mu_;
  std::map<std::string, wire::Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, wire::Lease> listing_ ABSL_GUARDED_BY(mu_);  // a list in progress
  int fallback_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<kube::ListWatcher> watcher_;  // last: stopped first
};

}  // namespace sluice::tunnel::agent
