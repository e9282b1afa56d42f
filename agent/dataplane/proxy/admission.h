// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "lib/net/address.h"

namespace sluice::proxy {

// The file descriptors the data path may hold: the process's limit less a reserve that the
// control plane (API watches, status servers, files, the tunnel agent) always finds free.
// Listeners, TCP connections (two each) and UDP flows take from it. Checked before taking, so
// workers racing each other may overshoot by a few: the reserve absorbs that.
// Thread-safe.
class FdBudget final {
 public:
  explicit FdBudget(int64_t limit) : limit_(limit) {}
  // RLIMIT_NOFILE's soft limit less `reserve`, but never under half of it: a small limit still
  // leaves the data path something to work with.
  static int64_t ForProcess(int64_t reserve);

  bool Full(int64_t n = 1) const { return used() + n > limit_; }
  void Take(int64_t n) { used_.fetch_add(n, std::memory_order_relaxed); }
  void Give(int64_t n) { used_.fetch_sub(n, std::memory_order_relaxed); }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

// What each client IP holds (connections or flows) against a cap, so that one client cannot
// take a whole worker. Thread: owning worker loop.
class SourceCounter final {
 public:
  explicit SourceCounter(size_t per_source) : per_source_(per_source) {}

  // Counts one more for `ip`; false (nothing counted) if it already holds the cap.
  bool TryAdd(const net::IpAddress& ip);
  void Remove(const net::IpAddress& ip);
  size_t Count(const net::IpAddress& ip) const;
  size_t sources() const { return counts_.size(); }
  size_t cap() const { return per_source_; }

 private:
  const size_t per_source_;
  absl::flat_hash_map<net::IpAddress, size_t> counts_;
};

}  // namespace sluice::proxy
