// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <vector>

#include "lib/base/unique_fd.h"

namespace sluice::testutil {

// Leaves the process without a free descriptor (EMFILE) for its lifetime: the soft
// RLIMIT_NOFILE is lowered to just above the descriptors open now and the rest filled. The
// destructor gives them back and restores the limit. Header-only, so that unit tests of the
// foundations can use it without linking sluice_testutil. Thread: the test's; other threads
// of the process fail to open descriptors meanwhile, which is the point.
class FdExhaustion final {
 public:
  FdExhaustion() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    base::UniqueFd probe(open("/dev/null", O_RDONLY | O_CLOEXEC));
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(probe.get()) + 16;
    limited_ = setrlimit(RLIMIT_NOFILE, &low) == 0;
    probe.Reset();
    for (base::UniqueFd fd; (fd = base::UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC)));) {
      held_.push_back(std::move(fd));
    }
    errno_ = errno;
  }
  ~FdExhaustion() { Release(); }
  FdExhaustion(const FdExhaustion&) = delete;
  FdExhaustion& operator=(const FdExhaustion&) = delete;

  // True when the last open failed with EMFILE, as intended.
  bool exhausted() const { return limited_ && errno_ == EMFILE; }
  // Ends the shortage early.
  void Release() {
    held_.clear();
    if (limited_) {
      setrlimit(RLIMIT_NOFILE, &saved_);
      limited_ = false;
    }
  }

 private:
  rlimit saved_{};
  bool limited_ = false;
  std::vector<base::UniqueFd> held_;
  int errno_ = 0;
};

}  // namespace sluice::testutil
