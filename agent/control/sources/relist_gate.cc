// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/relist_gate.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "lib/base/log.h"

namespace sluice::sources {

RelistGate::RelistGate(std::vector<std::string> kinds, absl::Duration timeout, base::Clock& clock,
                       Batch batch)
    : kinds_(std::move(kinds)),
      timeout_(timeout),
      clock_(clock),
      batch_(std::move(batch)),
      listed_(kinds_.size(), false),
      timeout_waiter_(clock) {
  thread_ = std::thread([this] { Run(); });
}

RelistGate::~RelistGate() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timeout_waiter_.Stop();
  thread_.join();
}

void RelistGate::Hold() {
  absl::MutexLock lock(&mu_);
  held_ = true;
  deadline_ = clock_.MonotonicNow() + timeout_;
  std::fill(listed_.begin(), listed_.end(), false);
}

void RelistGate::Push(absl::AnyInvocable<void()> push) {
  absl::MutexLock lock(&mu_);
  if (held_) {
    queue_.push_back(std::move(push));
    return;
  }
  push();  // under mu_: a release running meanwhile keeps the order
}

void RelistGate::Listed(int kind) {
  absl::MutexLock lock(&mu_);
  listed_[kind] = true;
  if (held_ && std::all_of(listed_.begin(), listed_.end(), [](bool b) { return b; })) {
    VLOG(1) << "kube: every kind listed again; applying " << queue_.size() << " held updates";
    Release();
    timeout_waiter_.Wake();  // the thread need not wait out the hold's deadline
  }
}

bool RelistGate::held() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

void RelistGate::Release() {
  held_ = false;
  if (queue_.empty()) {
    return;
  }
  batch_([this] {
    mu_.AssertHeld();  // Release's caller holds it; the analysis does not follow into lambdas
    while (!queue_.empty()) {
      absl::AnyInvocable<void()> push = std::move(queue_.front());
      queue_.pop_front();
      push();
    }
  });
}

void RelistGate::Run() {
  mu_.Lock();
  auto held_or_stopping = [this]()
                              ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return held_ || stopping_; };
  while (true) {
    mu_.Await(absl::Condition(&held_or_stopping));
    if (stopping_) {
      break;
    }
    const base::MonoTime deadline = deadline_;
    mu_.Unlock();
    timeout_waiter_.SleepUntil(deadline);
    mu_.Lock();
    // Released meanwhile, or a new Hold() moved the deadline on (wait again for the new one),
    // or a Wake() left over from an earlier release ended the sleep early.
    if (stopping_ || !held_ || deadline_ != deadline || clock_.MonotonicNow() < deadline) {
      continue;
    }
    std::vector<std::string> missing;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      if (!listed_[i]) {
        missing.push_back(kinds_[i]);
      }
    }
    LOG(WARNING) << "kube: " << absl::StrJoin(missing, " and ") << " not listed again within "
                 << absl::FormatDuration(timeout_) << " after the outage; applying "
                 << queue_.size() << " held updates without waiting longer";
    Release();
  }
  mu_.Unlock();
}

}  // namespace sluice::sources
