// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/net/address.h"

#include "agent/dataplane/vip/vip_manager.h"

namespace sluice::vip {

// An in-memory VipManager that records every call, for the Proxier's unit tests. It follows the
// real contract: addresses marked local with SetLocal() are never owned, Release and Reconcile
// touch only owned ones. Thread: the test's.
class FakeVipManager final : public VipManager {
 public:
  explicit FakeVipManager(std::string interface_name = "fake0")
      : interface_name_(std::move(interface_name)) {}

  // VipManager
  absl::Status Ensure(const net::IpAddress& ip) override {
    calls_.push_back(absl::StrCat("Ensure(", ip.ToString(), ")"));
    if (absl::Status status = TakeError(); !status.ok()) {
      return status;
    }
    if (ip.IsUnspecified()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ensure VIP ", ip.ToString(), ": unspecified"));
    }
    if (!local_.contains(ip)) {
      owned_.insert(ip);
    }
    return absl::OkStatus();
  }
  absl::Status Release(const net::IpAddress& ip) override {
    calls_.push_back(absl::StrCat("Release(", ip.ToString(), ")"));
    if (absl::Status status = TakeError(); !status.ok()) {
      return status;
    }
    owned_.erase(ip);
    return absl::OkStatus();
  }
  absl::Status Reconcile(const absl::flat_hash_set<net::IpAddress>& wanted) override {
    calls_.push_back(absl::StrCat("Reconcile(", Join(wanted), ")"));
    if (absl::Status status = TakeError(); !status.ok()) {
      return status;
    }
    owned_.clear();
    for (const net::IpAddress& ip : wanted) {
      if (!local_.contains(ip) && !ip.IsUnspecified()) {
        owned_.insert(ip);
      }
    }
    return absl::OkStatus();
  }
  absl::Status Update(const std::vector<net::IpAddress>& add,
                      const std::vector<net::IpAddress>& remove) override {
    using Set = absl::flat_hash_set<net::IpAddress>;
    calls_.push_back(absl::StrCat("Update(+", Join(Set(add.begin(), add.end())), " -",
                                  Join(Set(remove.begin(), remove.end())), ")"));
    if (absl::Status status = TakeError(); !status.ok()) {
      return status;
    }
    for (const net::IpAddress& ip : add) {
      if (!local_.contains(ip) && !ip.IsUnspecified()) {
        owned_.insert(ip);
      }
    }
    for (const net::IpAddress& ip : remove) {
      owned_.erase(ip);
    }
    return absl::OkStatus();
  }
  absl::Status RemoveAll() override {
    calls_.push_back("RemoveAll()");
    if (absl::Status status = TakeError(); !status.ok()) {
      return status;
    }
    owned_.clear();
    return absl::OkStatus();
  }
  void MarkStale() override { ++stale_marks_; }
  const absl::flat_hash_set<net::IpAddress>& Owned() const override { return owned_; }
  std::string interface_name() const override { return interface_name_; }

  // Test controls.
  // Treats `ip` as already local (someone else's address): Ensure and Reconcile do not own it.
  void SetLocal(const net::IpAddress& ip) { local_.insert(ip); }
  // The next call (of any method returning Status) fails with `status` and changes nothing.
  void FailNextCall(absl::Status status) { next_error_ = std::move(status); }
  // Calls so far, e.g. "Ensure(10.96.0.10)", "Reconcile(10.96.0.1,10.96.0.10)" (sorted),
  // "Update(+10.96.0.2 -10.96.0.1)", "RemoveAll()".
  const std::vector<std::string>& calls() const { return calls_; }
  void ClearCalls() { calls_.clear(); }
  // How often MarkStale() was called (not recorded in calls(): it changes nothing by itself).
  int stale_marks() const { return stale_marks_; }

 private:
  absl::Status TakeError() { return std::exchange(next_error_, absl::OkStatus()); }
  static std::string Join(const absl::flat_hash_set<net::IpAddress>& ips) {
    std::vector<net::IpAddress> sorted(ips.begin(), ips.end());
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> texts;
    texts.reserve(sorted.size());
    for (const net::IpAddress& ip : sorted) {
      texts.push_back(ip.ToString());
    }
    return absl::StrJoin(texts, ",");
  }

  std::string interface_name_;
  absl::flat_hash_set<net::IpAddress> owned_;
  absl::flat_hash_set<net::IpAddress> local_;
  absl::Status next_error_;
  std::vector<std::string> calls_;
  int stale_marks_ = 0;
};

}  // namespace sluice::vip
