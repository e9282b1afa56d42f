// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/load_balancer.h"

#include <algorithm>
#include <random>

#include "absl/hash/hash.h"

namespace sluice::proxy {

AffinityTable::Shard& AffinityTable::ShardFor(const net::IpAddress& client) {
  return shards_[absl::Hash<net::IpAddress>{}(client) % kShards];
}

std::optional<net::SocketAddress> AffinityTable::Lookup(const net::IpAddress& client,
                                                        base::MonoTime now,
                                                        absl::Duration timeout) {
  Shard& shard = ShardFor(client);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.entries.find(client);
  if (it == shard.entries.end()) {
    return std::nullopt;
  }
  if (now - it->second.last_used > timeout) {
    shard.entries.erase(it);
    return std::nullopt;
  }
  return it->second.endpoint;
}

bool AffinityTable::Remember(const net::IpAddress& client, const net::SocketAddress& endpoint,
                             base::MonoTime now, absl::Duration timeout) {
  Shard& shard = ShardFor(client);
  absl::MutexLock lock(&shard.mu);
  if (shard.entries.size() >= kMaxPerShard && !shard.entries.contains(client)) {
    absl::erase_if(shard.entries,
                   [&](const auto& kv) { return now - kv.second.last_used > timeout; });
    if (shard.entries.size() >= kMaxPerShard) {
      return false;
    }
  }
  shard.entries[client] = Entry{endpoint, now};
  return true;
}

void AffinityTable::Forget(const net::IpAddress& client) {
  Shard& shard = ShardFor(client);
  absl::MutexLock lock(&shard.mu);
  shard.entries.erase(client);
}

size_t AffinityTable::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    n += shard.entries.size();
  }
  return n;
}

namespace {

std::vector<net::SocketAddress> Shuffled(std::vector<net::SocketAddress> v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

}  // namespace

Balancer::Balancer(std::vector<net::SocketAddress> endpoints, Affinity affinity,
                   uint64_t shuffle_seed)
    : endpoints_(Shuffled(std::move(endpoints), shuffle_seed)), affinity_(std::move(affinity)) {}

bool Balancer::Contains(const net::SocketAddress& a) const {
  return std::find(endpoints_.begin(), endpoints_.end(), a) != endpoints_.end();
}

std::optional<net::SocketAddress> Balancer::Pick(const net::IpAddress& client, base::MonoTime now,
                                                 const std::vector<net::SocketAddress>& exclude) {
  auto excluded = [&](const net::SocketAddress& a) {
    return std::find(exclude.begin(), exclude.end(), a) != exclude.end();
  };
  AffinityTable* table = affinity_.table.get();
  if (table != nullptr) {
    // A sticky endpoint that left the service (or failed) is dropped, not used.
    if (auto sticky = table->Lookup(client, now, affinity_.timeout);
        sticky && Contains(*sticky) && !excluded(*sticky)) {
      table->Remember(client, *sticky, now, affinity_.timeout);  // sliding timeout
      return sticky;
    }
  }
  const size_t n = endpoints_.size();
  for (size_t tries = 0; tries < n; ++tries) {
    const net::SocketAddress& candidate =
        endpoints_[next_.fetch_add(1, std::memory_order_relaxed) % n];
    if (!excluded(candidate)) {
      if (table != nullptr) {
        table->Remember(client, candidate, now, affinity_.timeout);
      }
      return candidate;
    }
  }
  return std::nullopt;
}

void Balancer::DialFailed(const net::IpAddress& client) {
  if (affinity_.table) {
    affinity_.table->Forget(client);
  }
}

}  // namespace sluice::proxy
