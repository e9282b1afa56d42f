// SPDX-License-Identifier: Apache-2.0
#include "lib/base/klog.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

namespace sluice::base {

std::vector<Option> KlogOptions(KlogFlags& k) {
  using O = Option;
  constexpr O::Origin kKlog = O::Origin::kKlog;
  return {
      {"logtostderr", &k.logtostderr, "(klog) Log to standard error instead of files.", kKlog},
      {"alsologtostderr", &k.alsologtostderr,
       "(klog) Log to standard error as well as files (no effect when --logtostderr=true).", kKlog},
      {"log-file", &k.log_file,
       "(klog) If non-empty, use this log file (no effect when --logtostderr=true).", kKlog},
      {"log-dir", &k.log_dir,
       "(klog) If non-empty, write PROGRAM.log in this directory (no effect when "
       "--logtostderr=true).",
       kKlog},
      {"log-file-max-size", &k.log_file_max_size,
       "(klog) Megabytes a log file may grow to before it is started anew; 0 = unlimited.", kKlog},
      {"stderrthreshold", &k.stderrthreshold,
       "(klog) With --logtostderr=false, lines at or above this severity (INFO, WARNING, "
       "ERROR, FATAL or 0-3) also go to stderr.",
       kKlog},
      {"skip-headers", &k.skip_headers, "(klog) Leave the header prefix off log lines.", kKlog},
      {"add-dir-header", &k.add_dir_header, "(klog) Accepted; sluice logs the file name only.",
       kKlog, "", "sluice logs the file name only"},
      {"one-output", &k.one_output, "(klog) Accepted; sluice writes each line once anyway.", kKlog,
       "", "sluice writes each line once anyway"},
      {"skip-log-headers", &k.skip_log_headers,
       "(klog) Accepted; sluice writes no header into log files anyway.", kKlog, "",
       "sluice writes no header into log files anyway"},
      {"vmodule", &k.vmodule, "(klog) Accepted; per-file verbosity is not implemented.", kKlog, "",
       "per-file verbosity is not implemented; use -v"},
      {"log-backtrace-at", &k.log_backtrace_at, "(klog) Accepted; not implemented.", kKlog, "",
       "not implemented"},
      {"v", &k.v, "Log verbosity.", kKlog},
  };
}

void RegisterKlogFlags(FlagSet& f, KlogFlags& k) { RegisterOptions(f, KlogOptions(k)); }

namespace {
// klog's severities, also accepted as numbers; -1 when unknown.
int ParseSeverity(std::string_view s) {
  static constexpr std::array<std::string_view, 4> kNames = {"INFO", "WARNING", "ERROR", "FATAL"};
  const std::string upper = absl::AsciiStrToUpper(std::string(s));
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (upper == kNames[i] || upper == std::to_string(i)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// "I0102 15:04:05.000000 tid file:line] msg": our format, klog's and gRPC's.
bool HasHeader(std::string_view line) {
  return line.size() > 5 && std::string_view("IWEF").find(line[0]) != std::string_view::npos &&
         absl::ascii_isdigit(static_cast<unsigned char>(line[1])) &&
         line.find("] ") != std::string_view::npos;
}

void WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;  // nowhere left to report a failing log sink
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}
// The default path is in /tmp, where anyone may plant a symlink to a file of root's for us
// to append to (or create): O_NOFOLLOW refuses it. Created 0600: logs name services, addresses
// and errors that are not every user's business. An existing file keeps its mode.
absl::StatusOr<UniqueFd> OpenLogFile(const std::string& path) {
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (file) {
    return file;
  }
  const int err = errno;
  struct stat st;
  if (err == ELOOP && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("open log file ", path,
                     ": is a symbolic link, which is refused; give the file's own path"));
  }
  return ErrnoStatus(err, "open log file " + path);
}
}  // namespace

void WarnIgnoredFlags(const FlagSet& flags, std::string_view upstream,
                      std::span<const IgnoredFlag> own, std::span<const IgnoredFlag> shared) {
  KlogFlags defaults;
  for (const Option& row : KlogOptions(defaults)) {
    if (row.reported() && flags.Changed(row.name)) {
      LOG(WARNING) << "--" << row.name << " is accepted for compatibility with " << upstream
                   << " and has no effect: " << row.why;
    }
  }
  for (std::span<const IgnoredFlag> list : {shared, own}) {
    for (const IgnoredFlag& f : list) {
      if (flags.Changed(f.name)) {
        LOG(WARNING) << "--" << f.name << " is accepted for compatibility with " << upstream
                     << " and has no effect: " << f.why;
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<LogOutput>> LogOutput::Start(const KlogFlags& k,
                                                            std::string_view program) {
  SetVerbosity(static_cast<int>(k.v));
  const int threshold = ParseSeverity(k.stderrthreshold);
  if (threshold < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stderrthreshold: want INFO, WARNING, ERROR, FATAL or 0-3, got \"",
                     k.stderrthreshold, "\""));
  }
  if (k.log_file_max_size < 0) {
    return absl::InvalidArgumentError("--log-file-max-size must not be negative");
  }
  if (k.logtostderr && !k.skip_headers) {
    return nullptr;  // klog's default: everything to stderr as it is
  }
  UniqueFd file;
  if (!k.logtostderr) {
    std::string path = k.log_file;
    if (path.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      const std::string dir = !k.log_dir.empty() ? k.log_dir : (tmp && *tmp ? tmp : "/tmp");
      path = absl::StrCat(dir, "/", Absl(program), ".log");
    }
    ASSIGN_OR_RETURN(file, OpenLogFile(path));
  }
  UniqueFd saved(::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3));
  int p[2];
  if (!saved || ::pipe2(p, O_CLOEXEC) != 0) {
    return ErrnoStatus(errno, "redirect stderr");
  }
  UniqueFd read_end(p[0]);
  UniqueFd write_end(p[1]);
  if (::dup2(write_end.get(), STDERR_FILENO) < 0) {
    return ErrnoStatus(errno, "dup2(pipe -> stderr)");
  }
  // fd 2 is now the pipe's only writer, so putting stderr back ends the copy thread.
  return std::unique_ptr<LogOutput>(
      new LogOutput(k, threshold, std::move(file), std::move(saved), std::move(read_end)));
}

LogOutput::LogOutput(const KlogFlags& k, int threshold, UniqueFd file, UniqueFd saved_stderr,
                     UniqueFd pipe_read)
    : to_file_(file.valid()),
      also_stderr_(k.alsologtostderr),
      skip_headers_(k.skip_headers),
      threshold_(threshold),
      max_bytes_(static_cast<uint64_t>(k.log_file_max_size) << 20),
      file_(std::move(file)),
      saved_stderr_(std::move(saved_stderr)),
      pipe_read_(std::move(pipe_read)) {
  if (to_file_) {
    const off_t size = ::lseek(file_.get(), 0, SEEK_END);  // appending to an earlier run's file
    written_ = size > 0 ? static_cast<uint64_t>(size) : 0;
  }
  // The copy thread must never take a signal meant for the main thread's sigwait (a SIGTERM
  // delivered here would kill the process instead of starting a graceful stop).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  thread_ = std::thread([this] { Copy(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

LogOutput::~LogOutput() {
  (void)::dup2(saved_stderr_.get(), STDERR_FILENO);
  if (thread_.joinable()) {
    thread_.join();
  }
}

void LogOutput::Copy() {
  std::string pending;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(pipe_read_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      Line(std::string_view(pending).substr(start, nl + 1 - start));
    }
    pending.erase(0, start);
  }
  if (!pending.empty()) {
    Line(pending + "\n");
  }
}

void LogOutput::Line(std::string_view line) {
  const bool header = HasHeader(line);
  const int severity = header ? static_cast<int>(std::string_view("IWEF").find(line[0])) : 0;
  if (skip_headers_ && header) {
    line.remove_prefix(line.find("] ") + 2);
  }
  if (!to_file_ || also_stderr_ || severity >= threshold_) {
    WriteAll(saved_stderr_.get(), line);
  }
  if (to_file_) {
    if (max_bytes_ > 0 && written_ + line.size() > max_bytes_) {
      // klog starts a new file at the limit; one file under the same name is the simple form.
      (void)::ftruncate(file_.get(), 0);
      written_ = 0;
    }
    WriteAll(file_.get(), line);
    written_ += line.size();
  }
}

}  // namespace sluice::base
