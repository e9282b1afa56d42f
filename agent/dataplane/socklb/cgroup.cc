// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/cgroup.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace sluice::socklb {

absl::StatusOr<std::string> FindCgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "36 25 0:31 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) {
      continue;
    }
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    if (fields >> id >> parent >> dev >> root >> mount_point) {
      return mount_point;
    }
  }
  return absl::NotFoundError("no cgroup2 filesystem in /proc/self/mountinfo");
}

absl::StatusOr<uint64_t> Cgroup2Id(const std::string& dir) {
  struct statfs fs;
  if (statfs(dir.c_str(), &fs) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("statfs ", dir));
  }
  if (fs.f_type != CGROUP2_SUPER_MAGIC) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a cgroup v2 directory"));
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("stat ", dir));
  }
  return static_cast<uint64_t>(st.st_ino);
}

bool IsHierarchyRoot(const std::string& dir) {
  return access((dir + "/cgroup.type").c_str(), F_OK) != 0 && errno == ENOENT;
}

bool InCgroupSubtree(const std::string& dir) {
  auto mount = FindCgroup2Mount();
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (mount.ok() && std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) {
      continue;
    }
    std::error_code ec;
    const auto self = std::filesystem::weakly_canonical(*mount + line.substr(3), ec);
    const auto target = std::filesystem::weakly_canonical(dir, ec);
    if (ec) {
      return false;
    }
    const auto rel = self.lexically_relative(target);
    return !rel.empty() && rel.native().rfind("..", 0) != 0;
  }
  return false;
}

}  // namespace sluice::socklb
