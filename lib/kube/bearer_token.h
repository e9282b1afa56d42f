// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"

namespace sluice::kube {

// The bearer token sent with every API request: a fixed string, or a file that is re-read when
// older than the reload period and after a 401, because projected service account tokens
// rotate (kubelet rewrites the file well before expiry). The token is never logged.
// Thread-safe: the list/watch threads share one.
class BearerToken final {
 public:
  // Client-go re-reads token files every minute; so do we.
  static constexpr absl::Duration kReloadPeriod = absl::Minutes(1);

  // A file token must be readable and non-empty now. `clock` (its monotonic reading) times the
  // reload period and must outlive the token.
  static absl::StatusOr<std::unique_ptr<BearerToken>> Create(
      std::string fixed, std::string file, absl::Duration reload_period = kReloadPeriod,
      const base::Clock& clock = base::RealClock::Get());

  // The current token ("" when there is none). Re-reads the file when due; a failed re-read
  // keeps the previous token and is logged once per failure streak.
  std::string Get() ABSL_LOCKS_EXCLUDED(mu_);
  // Re-reads the file at the next Get() (after a 401). No-op for a fixed token.
  void Invalidate() ABSL_LOCKS_EXCLUDED(mu_);
  bool from_file() const { return !file_.empty(); }

 private:
  BearerToken(std::string fixed, std::string file, absl::Duration reload_period,
              const base::Clock& clock)
      : file_(std::move(file)),
        reload_period_(reload_period),
        clock_(clock),
        token_(std::move(fixed)) {}
  absl::Status ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string file_;
  const absl::Duration reload_period_;
  const base::Clock& clock_;
  absl::Mutex mu_;
  std::string token_ ABSL_GUARDED_BY(mu_);
  base::MonoTime read_at_ ABSL_GUARDED_BY(mu_) = base::MonoTime::InfinitePast();
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::kube
