// SPDX-License-Identifier: Apache-2.0
#include "lib/base/outage_probe.h"

#include <algorithm>

#include "lib/base/log.h"

namespace sluice::base {

OutageProbe::OutageProbe(Options options, Callbacks callbacks, Clock& clock)
    : options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      clock_(clock),
      interval_(clock) {
  thread_ = std::thread([this] { Run(); });
}

OutageProbe::~OutageProbe() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  interval_.Stop();
  callbacks_.cancel();
  thread_.join();
}

uint64_t OutageProbe::Unreachable() {
  absl::MutexLock lock(&mu_);
  wanted_ = std::max(wanted_, started_ + 1);
  return started_;
}

OutageProbe::Wait OutageProbe::Await(uint64_t ticket, const std::atomic<bool>& stop) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return answered_ > ticket || stop; };
  mu_.Await(absl::Condition(&done));
  if (answered_ <= ticket) {
    return Wait::kStopped;
  }
  return recovered_ > ticket ? Wait::kRecovered : Wait::kAnswered;
}

void OutageProbe::Wake() {
  absl::MutexLock lock(&mu_);  // the unlock re-evaluates every waiter's condition
}

int64_t OutageProbe::attempts() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(started_);
}

void OutageProbe::Run() {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || answered_ < wanted_;
  };
  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(&has_work));
    if (!stopping_) {
      const MonoTime next_probe = next_probe_;
      mu_.Unlock();
      interval_.SleepUntil(next_probe);  // false once stopping
      mu_.Lock();
    }
    if (stopping_) {
      break;
    }
    // The interval counts from the start of a probe, so a slow probe does not stretch it.
    next_probe_ = clock_.MonotonicNow() + options_.interval;
    const uint64_t number = ++started_;
    mu_.Unlock();
    const absl::Status status = callbacks_.probe();
    mu_.Lock();
    if (stopping_) {
      break;
    }
    if (!status.ok()) {
      if (callbacks_.on_failed) {
        mu_.Unlock();
        callbacks_.on_failed();
        mu_.Lock();
      }
      if (outage_since_ == 0) {
        outage_since_ = number;
        LOG(WARNING) << options_.server << " is unreachable (" << status.message()
                     << "); probing every " << absl::FormatDuration(options_.interval);
      }
      continue;
    }
    if (outage_since_ != 0) {
      LOG(INFO) << options_.server << " answers again after " << number - outage_since_
                << " failed probes";
      outage_since_ = 0;
      if (callbacks_.on_recovered) {
        mu_.Unlock();
        callbacks_.on_recovered();
        mu_.Lock();
      }
      recovered_ = number;
    }
    answered_ = number;
  }
  mu_.Unlock();
}

}  // namespace sluice::base
