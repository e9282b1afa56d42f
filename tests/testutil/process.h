// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::testutil {

// A child process started with posix_spawn, its stderr (and stdout) captured to a file.
// The destructor kills it (SIGKILL, by PID) and reaps it. Thread: the test's.
class Subprocess final {
 public:
  explicit Subprocess(std::vector<std::string> argv);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exited_; }
  // Sends a signal; returns false if the process is gone.
  bool Signal(int sig);
  // Waits up to `timeout` for exit; returns the exit code (128+signal if killed) or -1.
  int Wait(absl::Duration timeout);
  // Everything the child wrote so far.
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  std::string output_path_;
};

// Runs a command to completion and returns its exit code and output.
int RunCommand(std::vector<std::string> argv, std::string* output = nullptr,
               absl::Duration timeout = absl::Seconds(60));

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

// Polls `cond` every 20 ms until it is true or `timeout` passes.
template <typename Cond>
bool WaitFor(Cond cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!cond()) {
    if (absl::Now() > deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

}  // namespace sluice::testutil
