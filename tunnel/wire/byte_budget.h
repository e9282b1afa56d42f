// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>

namespace sluice::tunnel::wire {

// The server-wide bound on bytes queued across all tunnelled connections (--max-queued-bytes).
// Per-connection bounds alone allow connections x --max-connection-buffer. Queues charge what
// they take in and release what they hand on; one that finds the budget spent pauses the stream
// it reads from (a ReadGate hold, as past its own watermark) until it has written something, so
// the total overshoots by at most one message per stream and no connection is closed for it.
// Thread-safe.
class ByteBudget final {
 public:
  explicit ByteBudget(size_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  void Charge(size_t n) { used_.fetch_add(n, std::memory_order_relaxed); }
  void Release(size_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  bool spent() const { return used_.load(std::memory_order_relaxed) > limit_; }
  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

}  // namespace sluice::tunnel::wire
