// SPDX-License-Identifier: Apache-2.0
#include "lib/base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::base {

namespace {
std::atomic<int> g_verbosity{0};
}  // namespace

void SetVerbosity(int v) { g_verbosity.store(v, std::memory_order_relaxed); }
int Verbosity() { return g_verbosity.load(std::memory_order_relaxed); }

LogMessage::LogMessage(Severity severity, const char* file, int line) : severity_(severity) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  const char* base = std::strrchr(file, '/');
  stream_ << kLetters[static_cast<int>(severity)]
          << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(), absl::UTCTimeZone()) << ' '
          << static_cast<long>(::syscall(SYS_gettid)) << ' ' << (base ? base + 1 : file) << ':'
          << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write keeps lines from different threads whole (stderr is unbuffered).
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  if (severity_ == Severity::kFatal) {
    std::abort();
  }
}

}  // namespace sluice::base
