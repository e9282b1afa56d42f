// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/socket_walk.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

namespace sluice::socklb {

absl::Status WalkSocketsHere(bpf_link* link) {
  base::UniqueFd iter(bpf_iter_create(bpf_link__fd(link)));
  if (!iter) {
    return base::ErrnoStatus(errno, "bpf_iter_create");
  }
  char buf[256];
  ssize_t n;
  while ((n = read(iter.get(), buf, sizeof(buf))) > 0) {
  }
  return n == 0 ? absl::OkStatus() : base::ErrnoStatus(errno, "read(socket iterator)");
}

absl::Status WalkSocketsEverywhere(bpf_link* link) {
  absl::Status result = WalkSocketsHere(link);
  std::set<ino_t> seen;
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    seen.insert(st.st_ino);
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename();
    if (pid.empty() || pid[0] < '1' || pid[0] > '9') {
      continue;
    }
    const std::string path = absl::StrCat("/proc/", pid, "/ns/net");
    base::UniqueFd ns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns || fstat(ns.get(), &st) != 0 || !seen.insert(st.st_ino).second) {
      continue;  // the process has gone, or its namespace was walked already
    }
    std::thread t([&] {
      if (setns(ns.get(), CLONE_NEWNET) != 0) {
        result.Update(base::ErrnoStatus(errno, absl::StrCat("setns ", path)));
        return;
      }
      result.Update(WalkSocketsHere(link));
    });
    t.join();
  }
  return result;
}

}  // namespace sluice::socklb
