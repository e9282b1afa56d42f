// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <linux/bpf.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "lib/base/log.h"

struct bpf_map;

namespace sluice::fastpath {

// One BPF map as the agent programs it: fixed-size keys and values as bytes. The system seam
// between programming logic (which entries to write, in which order) and the kernel: KernelBpfMap
// is the real one over bpf(2); FakeBpfMap (fake_bpf_map.h) keeps the entries in memory for
// unprivileged unit tests. Thread: as the owner's (the kernel map itself is shared).
class BpfMap {
 public:
  virtual ~BpfMap() = default;

  virtual const std::string& name() const = 0;
  virtual uint32_t key_size() const = 0;
  // A per-CPU map's value is one value per possible CPU, back to back.
  virtual uint32_t value_size() const = 0;

  // NotFound when `key` is absent.
  virtual absl::Status Lookup(const void* key, void* value) const = 0;
  // `flags`: BPF_ANY, BPF_NOEXIST or BPF_EXIST. ResourceExhausted when the map is full.
  virtual absl::Status Update(const void* key, const void* value, uint64_t flags) = 0;
  // NotFound when `key` is absent.
  virtual absl::Status Delete(const void* key) = 0;
  // Writes `count` entries, keys and values back to back, in order, and stops at the first
  // that fails; returns how many were written and that failure. Where the map supports it
  // (KernelBpfMap: BPF_MAP_UPDATE_BATCH, hash maps, `flags` BPF_ANY) in few syscalls; otherwise
  // one Update per entry, which is what this default does.
  struct BatchResult {
    uint32_t written = 0;
    absl::Status status;
  };
  virtual BatchResult UpdateBatch(const void* keys, const void* values, uint32_t count,
                                  uint64_t flags);
  // Calls `fn` with every entry. Entries written meanwhile may or may not be seen; `fn` must
  // not write the map (collect, then write).
  virtual absl::Status ForEach(
      absl::FunctionRef<void(const void* key, const void* value)> fn) const = 0;
};

// A BpfMap with typed keys and values (the structs of bpf/include/sluice/bpf_abi.h), checked
// against the map's sizes once. Not for per-CPU maps. Thread: as the map's.
template <typename K, typename V>
class TypedMap final {
  static_assert(std::is_trivially_copyable_v<K> && std::is_trivially_copyable_v<V>);

 public:
  explicit TypedMap(BpfMap& map) : map_(map) {
    SLUICE_CHECK(map.key_size() == sizeof(K) && map.value_size() == sizeof(V)) << map.name();
  }

  absl::StatusOr<V> Lookup(const K& key) const {
    V value{};
    if (absl::Status st = map_.Lookup(&key, &value); !st.ok()) {
      return st;
    }
    return value;
  }
  absl::Status Update(const K& key, const V& value, uint64_t flags = BPF_ANY) {
    return map_.Update(&key, &value, flags);
  }
  absl::Status Delete(const K& key) { return map_.Delete(&key); }
  BpfMap::BatchResult UpdateBatch(const std::vector<K>& keys, const std::vector<V>& values,
                                  uint64_t flags = BPF_ANY) {
    SLUICE_CHECK(keys.size() == values.size()) << map_.name();
    return map_.UpdateBatch(keys.data(), values.data(), static_cast<uint32_t>(keys.size()), flags);
  }
  // Every entry, read before the caller deletes any (deleting while walking a hash map restarts
  // the walk).
  std::vector<std::pair<K, V>> Entries() const {
    std::vector<std::pair<K, V>> out;
    (void)map_.ForEach([&](const void* k, const void* v) {
      std::pair<K, V> e;
      std::memcpy(&e.first, k, sizeof(K));
      std::memcpy(&e.second, v, sizeof(V));
      out.push_back(e);
    });
    return out;
  }
  BpfMap& map() const { return map_; }

 private:
  BpfMap& map_;
};

// Every entry of a per-CPU map keyed by u32 whose value is one V per possible CPU: `fn(key,
// per-CPU values)`. Best effort, as a counters read is: returns the walk's failure.
template <typename V, typename Fn>
absl::Status ForEachPerCpu(const BpfMap& map, Fn fn) {
  static_assert(std::is_trivially_copyable_v<V>);
  SLUICE_CHECK(map.key_size() == sizeof(uint32_t) && map.value_size() % sizeof(V) == 0)
      << map.name();
  std::vector<V> values(map.value_size() / sizeof(V));
  return map.ForEach([&](const void* key, const void* value) {
    uint32_t k;
    std::memcpy(&k, key, sizeof(k));
    std::memcpy(values.data(), value, map.value_size());
    fn(k, values);
  });
}

// A map of a loaded object over bpf(2). The fd stays owned by the object (skeleton), which must
// outlive this. Thread-safe (each call is one or a few syscalls on the shared map).
class KernelBpfMap final : public BpfMap {
 public:
  // Per-CPU maps get a value of one struct per possible CPU.
  explicit KernelBpfMap(const bpf_map* map);

  int fd() const { return fd_; }

  // BpfMap
  const std::string& name() const override { return name_; }
  uint32_t key_size() const override { return key_size_; }
  uint32_t value_size() const override { return value_size_; }
  absl::Status Lookup(const void* key, void* value) const override;
  absl::Status Update(const void* key, const void* value, uint64_t flags) override;
  absl::Status Delete(const void* key) override;
  BatchResult UpdateBatch(const void* keys, const void* values, uint32_t count,
                          uint64_t flags) override;
  absl::Status ForEach(
      absl::FunctionRef<void(const void* key, const void* value)> fn) const override;

 private:
  // Without batch lookups (maps of other types): one key at a time.
  absl::Status ForEachByKey(absl::FunctionRef<void(const void* key, const void* value)> fn) const;

  const int fd_;
  const std::string name_;
  const uint32_t key_size_;
  const uint32_t value_size_;
  std::atomic<bool> no_batch_ = false;  // the map type has no update batches
};

}  // namespace sluice::fastpath
