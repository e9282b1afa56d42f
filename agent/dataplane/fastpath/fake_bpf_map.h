// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <linux/bpf.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

#include "agent/dataplane/fastpath/bpf_map.h"

namespace sluice::fastpath {

// A BpfMap kept in memory, as a hash map behaves from userspace: BPF_NOEXIST/BPF_EXIST,
// ResourceExhausted (E2BIG) once max_entries are in it, NotFound for absent keys. A test can
// fail the next call of one operation and watch every write (to check an invariant after each
// single map write, as a program running concurrently would see the maps). Thread: the test's.
class FakeBpfMap final : public BpfMap {
 public:
  FakeBpfMap(std::string name, uint32_t key_size, uint32_t value_size, uint32_t max_entries)
      : name_(std::move(name)),
        key_size_(key_size),
        value_size_(value_size),
        max_entries_(max_entries) {}

  // Called after every successful Update and Delete.
  std::function<void()> on_write;

  // The next call of `op` ("Lookup", "Update", "Delete", "ForEach") fails with `status`.
  void FailNext(std::string op, absl::Status status) {
    fail_op_ = std::move(op);
    fail_status_ = std::move(status);
  }
  size_t size() const { return entries_.size(); }
  uint64_t writes() const { return writes_; }
  // UpdateBatch calls (each entry of one is an Update: FailNext("Update") fails its first).
  uint64_t batches() const { return batches_; }
  template <typename K>
  bool Contains(const K& key) const {
    return entries_.contains(Bytes(&key, sizeof(K)));
  }

  // BpfMap
  const std::string& name() const override { return name_; }
  uint32_t key_size() const override { return key_size_; }
  uint32_t value_size() const override { return value_size_; }
  absl::Status Lookup(const void* key, void* value) const override {
    RETURN_IF_ERROR(Fail("Lookup"));
    auto it = entries_.find(Bytes(key, key_size_));
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("lookup ", name_, ": No such file or directory"));
    }
    std::memcpy(value, it->second.data(), value_size_);
    return absl::OkStatus();
  }
  absl::Status Update(const void* key, const void* value, uint64_t flags) override {
    RETURN_IF_ERROR(Fail("Update"));
    const std::string k = Bytes(key, key_size_);
    const bool exists = entries_.contains(k);
    if ((flags & 3) == BPF_NOEXIST && exists) {
      return absl::AlreadyExistsError(absl::StrCat("update ", name_, ": File exists"));
    }
    if ((flags & 3) == BPF_EXIST && !exists) {
      return absl::NotFoundError(absl::StrCat("update ", name_, ": No such file or directory"));
    }
    if (!exists && entries_.size() >= max_entries_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("update ", name_, ": Argument list too long"));
    }
    entries_[k] = Bytes(value, value_size_);
    return Wrote();
  }
  absl::Status Delete(const void* key) override {
    RETURN_IF_ERROR(Fail("Delete"));
    if (entries_.erase(Bytes(key, key_size_)) == 0) {
      return absl::NotFoundError(absl::StrCat("delete ", name_, ": No such file or directory"));
    }
    return Wrote();
  }
  BatchResult UpdateBatch(const void* keys, const void* values, uint32_t count,
                          uint64_t flags) override {
    ++batches_;
    return BpfMap::UpdateBatch(keys, values, count, flags);
  }
  absl::Status ForEach(
      absl::FunctionRef<void(const void* key, const void* value)> fn) const override {
    RETURN_IF_ERROR(Fail("ForEach"));
    for (const auto& [k, v] : entries_) {
      fn(k.data(), v.data());
    }
    return absl::OkStatus();
  }

 private:
  static std::string Bytes(const void* p, size_t n) {
    return std::string(static_cast<const char*>(p), n);
  }
  absl::Status Fail(const char* op) const {
    if (fail_op_ != op) {
      return absl::OkStatus();
    }
    fail_op_.clear();
    return fail_status_;
  }
  absl::Status Wrote() {
    ++writes_;
    if (on_write) {
      on_write();
    }
    return absl::OkStatus();
  }

  const std::string name_;
  const uint32_t key_size_;
  const uint32_t value_size_;
  const uint32_t max_entries_;
  std::map<std::string, std::string> entries_;
  uint64_t writes_ = 0;
  uint64_t batches_ = 0;
  mutable std::string fail_op_;
  absl::Status fail_status_;
};

}  // namespace sluice::fastpath
