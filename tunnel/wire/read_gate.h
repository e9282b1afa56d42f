// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sluice::tunnel::wire {

// Per-connection backpressure where the protocol has none. Upstream Konnectivity has no
// per-connection window (sluice peers negotiate one: packet.h, kWindowHeader), so when one
// tunnelled connection's receiver falls behind (its queue passes the high watermark) the only
// lever is the shared stream: the gate holds that stream's next read until the connection
// drains. A receiver that is merely slower than the sender thus slows its sender instead of
// being cut off; one that takes nothing for kStallGrace lets go (wire::StallWatch), so other
// connections on the stream wait at most kStallGrace (apiserver-network-proxy#180, #881).
// Thread-safe.
class ReadGate final {
 public:
  // How long one congested connection may hold a shared stream without progress.
  static constexpr absl::Duration kStallGrace = absl::Seconds(2);

  // `start_read` starts the stream's next read; it is called with the gate's lock held and must
  // not block (gRPC StartRead does not).
  explicit ReadGate(absl::AnyInvocable<void()> start_read) : start_read_(std::move(start_read)) {}
  ReadGate(const ReadGate&) = delete;
  ReadGate& operator=(const ReadGate&) = delete;

  // The previous read completed: start the next one unless held or closed.
  void ReadNext() {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      return;
    }
    if (holds_ > 0) {
      parked_ = true;
      return;
    }
    start_read_();
  }

  void Hold() {
    absl::MutexLock lock(&mu_);
    ++holds_;
  }

  void Release() {
    absl::MutexLock lock(&mu_);
    if (--holds_ == 0 && parked_ && !closed_) {
      parked_ = false;
      start_read_();
    }
  }

  // The stream is finishing: no read starts after this returns. Returns false if already
  // closed. This is the tunnel reactors' one "finish once" claim: whoever gets true calls
  // Finish (or ends the writes), from a reaction, the loop or a gRPC thread alike.
  bool Close() {
    absl::MutexLock lock(&mu_);
    return !std::exchange(closed_, true);
  }
  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

 private:
  absl::Mutex mu_;
  absl::AnyInvocable<void()> start_read_ ABSL_GUARDED_BY(mu_);
  int holds_ ABSL_GUARDED_BY(mu_) = 0;
  bool parked_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// One connection's hold on a ReadGate; releases on destruction. Thread: its owner's.
class GateHold final {
 public:
  GateHold() = default;
  ~GateHold() { Release(); }
  GateHold(const GateHold&) = delete;
  GateHold& operator=(const GateHold&) = delete;

  bool held() const { return gate_ != nullptr; }
  void Take(std::shared_ptr<ReadGate> gate) {
    if (gate_ == nullptr && gate != nullptr) {
      gate->Hold();
      gate_ = std::move(gate);
    }
  }
  void Release() {
    if (gate_ != nullptr) {
      std::exchange(gate_, nullptr)->Release();
    }
  }

 private:
  std::shared_ptr<ReadGate> gate_;
};

}  // namespace sluice::tunnel::wire
