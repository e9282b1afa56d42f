// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/listen.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace sluice::tunnel::server {
namespace {

// Makes every chmod-family call of this process fail with EPERM (seccomp, no privilege needed
// after PR_SET_NO_NEW_PRIVS). Only for a death-test child: it cannot be undone.
bool DenyChmod() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
#ifdef __NR_chmod
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_chmod, 2, 0),
#else
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fchmodat, 2, 0),
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fchmodat, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

// The socket file is 0770 from bind on, whatever the umask: no chmod after bind (which left a
// window with the umask's mode, anything up to 0777), shown by a process that cannot chmod.
// The process umask is as before afterwards.
TEST(ListenUnixTest, SocketIsCreatedWithItsFinalModeWithoutChmod) {
  char tmpl[] = "/tmp/sluice-listen-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/s.sock";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!DenyChmod()) {
          _exit(2);
        }
        umask(0);
        auto fd = ListenUnix(path, false);
        struct stat st;
        int code = 0;
        if (!fd.ok() || lstat(path.c_str(), &st) != 0) {
          fprintf(stderr, "%s\n", fd.status().ToString().c_str());
          code = 3;
        } else if ((st.st_mode & 07777) != 0770 || umask(0) != 0) {
          code = 4;
        }
        // The "threadsafe" style re-runs the whole test in the child, mkdtemp included: the
        // child removes the directory it made.
        unlink(path.c_str());
        rmdir(tmpl);
        _exit(code);
      },
      ::testing::ExitedWithCode(0), "");
  unlink(path.c_str());
  rmdir(tmpl);
}

}  // namespace
}  // namespace sluice::tunnel::server
