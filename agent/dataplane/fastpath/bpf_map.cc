// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/fastpath/bpf_map.h"

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/dataplane/fastpath/skeleton.h"

namespace sluice::fastpath {
namespace {

// The kernel's ENOTSUPP (include/linux/errno.h), which userspace headers lack: what bpf(2)
// returns for a batch command the map type does not implement.
constexpr int kENOTSUPP = 524;

bool PerCpu(bpf_map_type type) {
  return type == BPF_MAP_TYPE_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_ARRAY ||
         type == BPF_MAP_TYPE_LRU_PERCPU_HASH || type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

uint32_t ValueSize(const bpf_map* map) {
  const uint32_t size = bpf_map__value_size(map);
  if (!PerCpu(bpf_map__type(map))) {
    return size;
  }
  // The kernel copies each CPU's value rounded up to 8 bytes.
  const uint32_t cpus = static_cast<uint32_t>(std::max(libbpf_num_possible_cpus(), 1));
  return ((size + 7) / 8 * 8) * cpus;
}

}  // namespace

BpfMap::BatchResult BpfMap::UpdateBatch(const void* keys, const void* values, uint32_t count,
                                        uint64_t flags) {
  const char* k = static_cast<const char*>(keys);
  const char* v = static_cast<const char*>(values);
  BatchResult result;
  for (; result.written < count; ++result.written) {
    result.status = Update(k + size_t{result.written} * key_size(),
                           v + size_t{result.written} * value_size(), flags);
    if (!result.status.ok()) {
      break;
    }
  }
  return result;
}

KernelBpfMap::KernelBpfMap(const bpf_map* map)
    : fd_(bpf_map__fd(map)),
      name_(bpf_map__name(map)),
      key_size_(bpf_map__key_size(map)),
      value_size_(ValueSize(map)) {}

absl::Status KernelBpfMap::Lookup(const void* key, void* value) const {
  if (bpf_map_lookup_elem(fd_, key, value) != 0) {
    return MapError(absl::StrCat("lookup ", name_));
  }
  return absl::OkStatus();
}

absl::Status KernelBpfMap::Update(const void* key, const void* value, uint64_t flags) {
  if (bpf_map_update_elem(fd_, key, value, flags) != 0) {
    return MapError(absl::StrCat("update ", name_));
  }
  return absl::OkStatus();
}

absl::Status KernelBpfMap::Delete(const void* key) {
  if (bpf_map_delete_elem(fd_, key) != 0) {
    return MapError(absl::StrCat("delete ", name_));
  }
  return absl::OkStatus();
}

BpfMap::BatchResult KernelBpfMap::UpdateBatch(const void* keys, const void* values, uint32_t count,
                                              uint64_t flags) {
  BatchResult result;
  // The kernel's batch takes no BPF_NOEXIST/BPF_EXIST (generic_map_update_batch: EINVAL), and
  // a map type without batch ops fails before writing anything; from the first entry it did not
  // write, one call per entry then tells which entry fails and why.
  if (flags == BPF_ANY && count > 1 && !no_batch_.load(std::memory_order_relaxed)) {
    uint32_t n = count;
    LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = 0, .flags = 0);
    if (bpf_map_update_batch(fd_, keys, values, &n, &opts) == 0) {
      result.written = count;
      return result;
    }
    if (errno == kENOTSUPP) {
      no_batch_.store(true, std::memory_order_relaxed);  // a map type without batch ops
    } else if (n < count) {
      result.written = n;  // the kernel's count of entries written before the failure
    }
    // Otherwise the count was not updated (a check before the first entry): all again, singly.
  }
  const BatchResult rest =
      BpfMap::UpdateBatch(static_cast<const char*>(keys) + size_t{result.written} * key_size_,
                          static_cast<const char*>(values) + size_t{result.written} * value_size_,
                          count - result.written, flags);
  result.written += rest.written;
  result.status = rest.status;
  return result;
}

absl::Status KernelBpfMap::ForEach(
    absl::FunctionRef<void(const void* key, const void* value)> fn) const {
  // In batches: with 10,000 services one lookup per entry made a metrics scrape take ~80 ms.
  constexpr uint32_t kBatch = 1024;
  std::vector<char> keys(size_t{kBatch} * key_size_);
  std::vector<char> values(size_t{kBatch} * value_size_);
  // The kernel's batch position (a bucket index for hash maps); key-sized at least, as libbpf
  // documents it.
  std::vector<char> cursor(std::max<size_t>(key_size_, 8));
  for (bool first = true;; first = false) {
    uint32_t count = kBatch;
    const int err = bpf_map_lookup_batch(fd_, first ? nullptr : cursor.data(), cursor.data(),
                                         keys.data(), values.data(), &count, nullptr);
    const int error = err == 0 ? 0 : errno;
    if (err != 0 && error != ENOENT) {
      // EINVAL/ENOTSUPP: no batch operations for this map type (or kernel).
      return first ? ForEachByKey(fn) : MapError(absl::StrCat("lookup batch ", name_));
    }
    for (uint32_t i = 0; i < count; ++i) {
      fn(keys.data() + size_t{i} * key_size_, values.data() + size_t{i} * value_size_);
    }
    if (error == ENOENT) {
      return absl::OkStatus();  // that was the last batch
    }
  }
}

absl::Status KernelBpfMap::ForEachByKey(
    absl::FunctionRef<void(const void* key, const void* value)> fn) const {
  std::vector<char> key(key_size_);
  std::vector<char> prev(key_size_);
  std::vector<char> value(value_size_);
  for (bool first = true; bpf_map_get_next_key(fd_, first ? nullptr : prev.data(), key.data()) == 0;
       first = false) {
    if (bpf_map_lookup_elem(fd_, key.data(), value.data()) == 0) {
      fn(key.data(), value.data());
    }
    prev.swap(key);
  }
  return absl::OkStatus();
}

}  // namespace sluice::fastpath
