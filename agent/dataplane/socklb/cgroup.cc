// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/cgroup.h"

#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
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

namespace {

bool IsCgroup2(const std::string& dir) {
  struct statfs fs;
  return statfs(dir.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
}

}  // namespace

absl::StatusOr<std::string> ResolveCgroup2(const std::string& dir) {
  if (IsCgroup2(dir)) {
    return dir;
  }
  const std::string unified = dir + "/unified";
  if (IsCgroup2(unified)) {
    return unified;
  }
  return absl::FailedPreconditionError(
      absl::StrCat(dir, " is not a cgroup v2 directory, nor is ", unified));
}

absl::StatusOr<std::string> EnsureCgroup2(const std::string& dir) {
  if (auto found = ResolveCgroup2(dir); found.ok()) {
    return found;
  }
  const std::string unified = dir + "/unified";
  if (mkdir(unified.c_str(), 0755) != 0 && errno != EEXIST) {
    return base::ErrnoStatus(errno, absl::StrCat("mkdir ", unified));
  }
  if (mount("cgroup2", unified.c_str(), "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) !=
      0) {
    return base::ErrnoStatus(errno, absl::StrCat("mount cgroup2 on ", unified));
  }
  LOG(INFO) << "socket LB: no cgroup v2 at " << dir << ": mounted cgroup2 on " << unified;
  return unified;
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
