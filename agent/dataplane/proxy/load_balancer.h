// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"
#include "lib/net/address.h"

namespace sluice::proxy {

// ClientIP session affinity: which endpoint each client IP last used, with a sliding timeout.
// Shared by every worker (a client's connections land on different workers through
// SO_REUSEPORT), so it is sharded by client IP; the control plane never touches it, it only
// hands the same table to the next Balancer while affinity stays on. Thread-safe.
class AffinityTable final {
 public:
  // A bound on what clients can make us allocate: 16 shards x 65536 client IPs.
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxPerShard = 65536;

  // The endpoint `client` is stuck to if it was used within `timeout` before `now`.
  std::optional<net::SocketAddress> Lookup(const net::IpAddress& client, base::MonoTime now,
                                           absl::Duration timeout);
  // Records (or refreshes) the client's endpoint. Returns false if the shard is full of live
  // entries (the client then simply has no affinity).
  bool Remember(const net::IpAddress& client, const net::SocketAddress& endpoint,
                base::MonoTime now, absl::Duration timeout);
  void Forget(const net::IpAddress& client);
  size_t size() const;

 private:
  struct Entry {
    net::SocketAddress endpoint;
    base::MonoTime last_used;
  };
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<net::IpAddress, Entry> entries ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(const net::IpAddress& client);

  std::array<Shard, kShards> shards_;
};

// Picks endpoints for one service port: round-robin over a list shuffled at construction (the
// seed LoadBalancerRR reshuffled on every update; a new Balancer is built per update), with
// optional ClientIP affinity. Immutable except for its counters. Thread-safe.
class Balancer final {
 public:
  struct Affinity {
    std::shared_ptr<AffinityTable> table;  // nullptr: no affinity
    absl::Duration timeout = absl::Hours(3);
  };

  Balancer(std::vector<net::SocketAddress> endpoints, Affinity affinity, uint64_t shuffle_seed);

  // An endpoint for a new connection of `client`, skipping `exclude` (endpoints that already
  // failed for this connection). nullopt when none is left.
  std::optional<net::SocketAddress> Pick(const net::IpAddress& client, base::MonoTime now,
                                         const std::vector<net::SocketAddress>& exclude = {});
  // The dial to `endpoint` failed: drop the client's affinity so the retry may go elsewhere.
  void DialFailed(const net::IpAddress& client);

  const std::vector<net::SocketAddress>& endpoints() const { return endpoints_; }
  bool empty() const { return endpoints_.empty(); }
  const Affinity& affinity() const { return affinity_; }

 private:
  bool Contains(const net::SocketAddress& a) const;

  const std::vector<net::SocketAddress> endpoints_;  // shuffled
  const Affinity affinity_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace sluice::proxy
