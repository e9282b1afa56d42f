// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "absl/status/statusor.h"

#include "agent/base/unique_fd.h"

namespace sluice::testutil {

// Moves the calling thread into a new, empty network namespace with `lo` up, for the lifetime of
// the object. The destructor moves the thread back; the kernel frees the namespace once no
// thread, process or socket holds it, so destroy everything created inside first. Child
// processes spawned by this thread meanwhile (RunCommand) start inside it.
// Thread: the creating thread only; network namespaces are per thread.
class NetNs final {
 public:
  // PermissionDenied without CAP_SYS_ADMIN; tests GTEST_SKIP on that.
  static absl::StatusOr<std::unique_ptr<NetNs>> Create();
  ~NetNs();
  NetNs(const NetNs&) = delete;
  NetNs& operator=(const NetNs&) = delete;

  // The new namespace, e.g. for setns(2) from another thread.
  int fd() const { return created_.get(); }

 private:
  NetNs(base::UniqueFd original, base::UniqueFd created)
      : original_(std::move(original)), created_(std::move(created)) {}

  base::UniqueFd original_;
  base::UniqueFd created_;
};

}  // namespace sluice::testutil
