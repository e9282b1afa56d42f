// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

#include "agent/base/log.h"
#include "agent/base/status.h"

namespace sluice::testutil {

namespace {

// /proc/thread-self, not /proc/self: the namespace is the calling thread's.
constexpr char kThreadNetNs[] = "/proc/thread-self/ns/net";

absl::Status SetLoopbackUp() {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket(AF_INET)");
  }
  ifreq request{};
  strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(fd.get(), SIOCGIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, "ioctl(SIOCGIFFLAGS lo)");
  }
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  if (ioctl(fd.get(), SIOCSIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, "ioctl(SIOCSIFFLAGS lo up)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetNs>> NetNs::Create() {
  base::UniqueFd original(open(kThreadNetNs, O_RDONLY | O_CLOEXEC));
  if (!original) {
    return base::ErrnoStatus(errno, absl::StrCat("open ", kThreadNetNs));
  }
  if (unshare(CLONE_NEWNET) < 0) {
    return base::ErrnoStatus(errno, "unshare(CLONE_NEWNET)");
  }
  base::UniqueFd created(open(kThreadNetNs, O_RDONLY | O_CLOEXEC));
  // From here on the thread is inside; the object's destructor takes it back on every path.
  std::unique_ptr<NetNs> netns(new NetNs(std::move(original), std::move(created)));
  if (!netns->created_) {
    return base::ErrnoStatus(errno, absl::StrCat("open new ", kThreadNetNs));
  }
  RETURN_IF_ERROR(SetLoopbackUp());
  return netns;
}

NetNs::~NetNs() {
  if (setns(original_.get(), CLONE_NEWNET) < 0) {
    // The test thread would go on in the wrong namespace; nothing sensible can follow.
    SLUICE_CHECK(false) << "setns back to the original network namespace: " << strerror(errno);
  }
}

}  // namespace sluice::testutil
