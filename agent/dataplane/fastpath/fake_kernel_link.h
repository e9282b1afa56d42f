// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

#include "agent/dataplane/fastpath/kernel_link.h"

namespace sluice::fastpath {

// A KernelLink whose kernel is the test: it records every call as text ("Pass(client)"),
// answers Measure with the Progress the test set for that direction (its `written` as the
// destination's total, minus the caller's `user_written`, as SockmapLink does), and fails the
// next call of a method named in fail_next. Thread: the test's.
class FakeKernelLink final : public KernelLink {
 public:
  struct Direction {
    Progress progress;  // written: every byte in the destination's send stream since enrolment
    bool attached = false;
    bool pass = false;
    uint64_t mark = 0;
    uint64_t resume_at = 0;
  };

  Direction& direction(Side src) { return directions_[static_cast<int>(src)]; }
  const std::vector<std::string>& calls() const { return calls_; }
  // The next call of `method` ("Attach", "Measure", ...) fails with `status`.
  void FailNext(std::string method, absl::Status status) {
    fail_method_ = std::move(method);
    fail_status_ = std::move(status);
  }

  // KernelLink
  absl::Status Attach(Side src) override {
    RETURN_IF_ERROR(Record("Attach", src));
    direction(src).attached = true;
    return absl::OkStatus();
  }
  absl::StatusOr<Progress> Measure(Side src, uint64_t user_written) const override {
    RETURN_IF_ERROR(Record("Measure", src));
    Progress p = directions_[static_cast<int>(src)].progress;
    p.written = p.written > user_written ? p.written - user_written : 0;
    return p;
  }
  absl::Status SetMark(Side src, uint64_t notify_at) override {
    RETURN_IF_ERROR(Record("SetMark", src));
    direction(src).mark = notify_at;
    return absl::OkStatus();
  }
  absl::Status Pass(Side src) override {
    RETURN_IF_ERROR(Record("Pass", src));
    direction(src).pass = true;
    direction(src).mark = 0;
    return absl::OkStatus();
  }
  absl::Status Resume(Side src, uint64_t forwarded, uint64_t notify_at) override {
    RETURN_IF_ERROR(Record("Resume", src));
    Direction& d = direction(src);
    d.pass = false;
    d.resume_at = forwarded;
    d.mark = notify_at;
    return absl::OkStatus();
  }
  absl::Status Kick(Side src) override {
    RETURN_IF_ERROR(Record("Kick", src));
    return absl::OkStatus();
  }

 private:
  absl::Status Record(const std::string& method, Side src) const {
    calls_.push_back(absl::StrCat(method, "(", src == Side::kClient ? "client" : "backend", ")"));
    if (method != fail_method_) {
      return absl::OkStatus();
    }
    fail_method_.clear();
    return fail_status_;
  }

  std::array<Direction, 2> directions_;
  mutable std::vector<std::string> calls_;
  mutable std::string fail_method_;
  absl::Status fail_status_;
};

}  // namespace sluice::fastpath
