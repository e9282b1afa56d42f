// SPDX-License-Identifier: Apache-2.0
#include "lib/base/capabilities.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status.h"

namespace sluice::base {

absl::Status RequireCapabilities(const std::vector<Capability>& caps) {
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) {
    return ErrnoStatus(errno, "capget");
  }
  auto has = [&](int cap) { return (data[cap / 32].effective & (1u << (cap % 32))) != 0; };
  if (has(CAP_SYS_ADMIN)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing, all;
  for (const auto& [cap, name] : caps) {
    all.push_back(name);
    if (!has(cap)) {
      missing.push_back(name);
    }
  }
  if (missing.empty()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat("missing ", absl::StrJoin(missing, " and "),
                                                  " (needs ", absl::StrJoin(all, " and "),
                                                  ", or CAP_SYS_ADMIN)"));
}

}  // namespace sluice::base
