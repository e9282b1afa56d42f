// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"

namespace sluice::sources {

// Holds back what the watchers of one API server push into the mux after an outage until every
// kind has been listed again, then lets it all through in order. The watchers list again at
// once when the server answers, but each at its own pace: without the hold, a sync could serve
// a Service listed after the outage with its EndpointSlice from before it while the new slice
// is already on its way. A kind that cannot be listed (RBAC, a broken object) holds the rest
// back for `timeout` at most. What a hold kept back is let through as one batch (`batch`, the
// mux's: config::SourceChannel::Batch), so that no sync lands between the kinds either.
// Thread-safe; owns a thread that ends a hold at its timeout.
class RelistGate final {
 public:
  // Runs the pushes it is given as one change of the merged view.
  using Batch = absl::AnyInvocable<void(absl::FunctionRef<void()> pushes)>;
  // `kinds` names the kinds, for logs; a kind is its index.
  RelistGate(std::vector<std::string> kinds, absl::Duration timeout, base::Clock& clock,
             Batch batch);
  // Joins the thread; what is held back is dropped.
  ~RelistGate();
  RelistGate(const RelistGate&) = delete;
  RelistGate& operator=(const RelistGate&) = delete;

  // The server answers again after an outage: hold pushes until each kind's next Listed().
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `push` now, or queues it while held. Pushes run one at a time, in order.
  void Push(absl::AnyInvocable<void()> push) ABSL_LOCKS_EXCLUDED(mu_);
  // `kind` completed a list (pushed before this call).
  void Listed(int kind) ABSL_LOCKS_EXCLUDED(mu_);

  bool held() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<std::string> kinds_;
  const absl::Duration timeout_;
  base::Clock& clock_;
  Batch batch_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  base::MonoTime deadline_ ABSL_GUARDED_BY(mu_);   // of the hold
  std::vector<bool> listed_ ABSL_GUARDED_BY(mu_);  // since Hold()
  std::deque<absl::AnyInvocable<void()>> queue_ ABSL_GUARDED_BY(mu_);
  base::Waiter timeout_waiter_;  // the thread's sleep until a hold's deadline
  std::thread thread_;
};

}  // namespace sluice::sources
