// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/cgroup.h"

#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "agent/dataplane/socklb/cgroup.h"
#include "tests/testutil/process.h"

namespace sluice::testutil {
namespace {

absl::Status Join(const std::string& dir) {
  std::ofstream procs(dir + "/cgroup.procs");
  procs << getpid() << std::flush;
  if (!procs) {
    return absl::PermissionDeniedError(absl::StrCat("join cgroup ", dir));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestCgroup>> TestCgroup::Create() {
  ASSIGN_OR_RETURN(std::string mount, socklb::FindCgroup2Mount());
  std::string self;
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) {
      self = mount + line.substr(3);
    }
  }
  if (self.empty()) {
    return absl::NotFoundError("no cgroup v2 line in /proc/self/cgroup");
  }
  const std::string path = absl::StrCat(mount, "/sluice-test-", getpid());
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return base::ErrnoStatus(errno, absl::StrCat("mkdir ", path));
  }
  std::unique_ptr<TestCgroup> cg(new TestCgroup(path, self));
  RETURN_IF_ERROR(Join(path));
  return cg;
}

TestCgroup::~TestCgroup() {
  if (!Join(original_).ok()) {
    (void)Join(socklb::FindCgroup2Mount().value_or("/sys/fs/cgroup"));
  }
  // Children the test spawned may take a moment to be reaped after their exit.
  WaitFor([&] { return rmdir(path_.c_str()) == 0 || errno == ENOENT; }, absl::Seconds(10));
}

absl::StatusOr<std::unique_ptr<TestBpfFs>> TestBpfFs::Create() {
  char tmpl[] = "/tmp/sluice-bpffs-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return base::ErrnoStatus(errno, "mkdtemp");
  }
  if (mount("bpf", tmpl, "bpf", 0, "mode=0700") != 0) {
    absl::Status st = base::ErrnoStatus(errno, absl::StrCat("mount bpffs on ", tmpl));
    rmdir(tmpl);
    return st;
  }
  return std::unique_ptr<TestBpfFs>(new TestBpfFs(tmpl));
}

TestBpfFs::~TestBpfFs() {
  if (umount2(path_.c_str(), MNT_DETACH) != 0) {
    LOG(ERROR) << "umount " << path_ << ": " << strerror(errno);
  }
  rmdir(path_.c_str());
}

}  // namespace sluice::testutil
