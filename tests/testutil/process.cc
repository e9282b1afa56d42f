// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/synchronization/mutex.h"
#include "lib/base/unique_fd.h"

extern char** environ;

namespace sluice::testutil {

Subprocess::Subprocess(std::vector<std::string> argv) {
  char tmpl[] = "/tmp/sluice-subprocess-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    return;
  }
  output_path_ = tmpl;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fd, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Children start with no blocked signals, whatever the test thread blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);  // and the terminating null
  for (auto& a : argv) {
    args.push_back(a.data());
  }
  args.push_back(nullptr);
  if (posix_spawnp(&pid_, args[0], &actions, &attr, args.data(), environ) != 0) {
    pid_ = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fd);
}

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
  if (!output_path_.empty()) {
    unlink(output_path_.c_str());
  }
}

bool Subprocess::Signal(int sig) { return running() && kill(pid_, sig) == 0; }

int Subprocess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) {
    return -1;
  }
  WaitFor(
      [&] {
        if (exited_) {
          return true;
        }
        int status;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          exited_ = true;
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        return exited_;
      },
      timeout);
  return exited_ ? exit_code_ : -1;
}

std::string Subprocess::Output() const {
  std::ifstream in(output_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int RunCommand(std::vector<std::string> argv, std::string* output, absl::Duration timeout) {
  Subprocess p(std::move(argv));
  int code = p.Wait(timeout);
  if (output != nullptr) {
    *output = p.Output();
  }
  return code;
}

namespace {

// Whether `port` on 127.0.0.1 can be bound now.
bool Bindable(int port) {
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return fd && bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

}  // namespace

int FreePort() {
  // Below the ephemeral range: a port bind(0) hands out is one the kernel may give next to any
  // test's outgoing connection as its source port (thousands a second while the connection
  // tests run beside this one), and the port then is "in use" by the time the test's server
  // binds it (seen in CI). Random in a band between the bench harness's 25000-25600 and the
  // NodePort range (30000-32767, which tests use), so tests in parallel processes rarely pick
  // the same one; never twice in one process.
  static absl::Mutex mu;
  static std::set<int> given ABSL_GUARDED_BY(mu);
  static std::mt19937 rng(std::random_device{}());
  absl::MutexLock lock(&mu);
  const int high = std::min(29999, EphemeralLow() - 1);
  std::uniform_int_distribution<int> pick(std::max(1024, high - 4299), high);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    if (!given.contains(port) && Bindable(port)) {
      given.insert(port);
      return port;
    }
  }
  return -1;
}

}  // namespace sluice::testutil
