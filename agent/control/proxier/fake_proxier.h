// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"

#include "agent/control/proxier/proxier.h"

namespace sluice::proxier {

// Feeds one consumer tables as the Proxier does, for the consumers' unit tests: each with its
// changes against the previous table (by object, as the Proxier keeps an unchanged port's),
// full for the consumer's first two, when the same table comes again (the periodic resync)
// and after the consumer failed. Thread: the test's.
class FakeProxier final {
 public:
  explicit FakeProxier(TableConsumer& consumer) : consumer_(consumer) {}

  absl::Status Apply(std::shared_ptr<const ServiceTable> table) {
    const bool full = syncs_ < 2 || failed_ || table == prev_;
    changes_.clear();
    const auto& before = prev_->ports();
    const auto& after = table->ports();
    auto a = before.begin();
    auto b = after.begin();
    while (a != before.end() || b != after.end()) {
      if (b == after.end() || (a != before.end() && a->first < b->first)) {
        changes_.push_back({a->first, a->second, nullptr});
        ++a;
      } else if (a == before.end() || b->first < a->first) {
        changes_.push_back({b->first, nullptr, b->second});
        ++b;
      } else {
        if (a->second != b->second) {
          changes_.push_back({a->first, a->second, b->second});
        }
        ++a;
        ++b;
      }
    }
    absl::Status status = consumer_.Apply({.table = table, .changes = changes_, .full = full});
    ++syncs_;
    failed_ = !status.ok();
    prev_ = std::move(table);
    return status;
  }
  // The changes the last Apply handed over.
  const std::vector<PortChange>& changes() const { return changes_; }

 private:
  TableConsumer& consumer_;
  std::shared_ptr<const ServiceTable> prev_ = std::make_shared<ServiceTable>();
  std::vector<PortChange> changes_;
  int syncs_ = 0;
  bool failed_ = false;
};

}  // namespace sluice::proxier
