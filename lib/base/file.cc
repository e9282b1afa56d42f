// SPDX-License-Identifier: Apache-2.0
#include "lib/base/file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"

namespace sluice::base {

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("read ", path));
  }
  std::string out;
  char buf[64 * 1024];
  while (true) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read ", path));
    }
    if (n == 0) {
      return out;
    }
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("read ", path, ": larger than the limit of ", max_bytes, " bytes"));
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

void RaiseFileLimit() {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    const rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      LOG(INFO) << "raised the open file limit from " << was << " to " << lim.rlim_cur;
    } else {
      LOG(WARNING) << "cannot raise the open file limit above " << was << ": " << strerror(errno);
    }
  }
}

}  // namespace sluice::base
