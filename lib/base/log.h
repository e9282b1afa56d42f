// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sstream>

// klog-style logging to stderr: "I1123 07:23:40.123456 1234 file.cc:12] message". Users of
// kube-proxy read and grep this format. Thread-safe: each message is one write(2).
//   LOG(INFO) << "..."; LOG(WARNING) ...; LOG(ERROR) ...; VLOG(2) << "...";
//   SLUICE_CHECK(cond) << "..." aborts on a broken internal invariant (never on input).

namespace sluice::base {

enum class Severity { kInfo, kWarning, kError, kFatal };

void SetVerbosity(int v);
int Verbosity();

class LogMessage final {
 public:
  LogMessage(Severity severity, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  Severity severity_;
  std::ostringstream stream_;
};

// Swallows the stream in the disabled branch of VLOG.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace sluice::base

#define SLUICE_LOG_INFO ::sluice::base::Severity::kInfo
#define SLUICE_LOG_WARNING ::sluice::base::Severity::kWarning
#define SLUICE_LOG_ERROR ::sluice::base::Severity::kError
#define SLUICE_LOG_FATAL ::sluice::base::Severity::kFatal

#define LOG(severity) ::sluice::base::LogMessage(SLUICE_LOG_##severity, __FILE__, __LINE__).stream()
#define VLOG(level) \
  (::sluice::base::Verbosity() < (level)) ? (void)0 : ::sluice::base::LogVoidify() & LOG(INFO)
#define SLUICE_CHECK(cond) \
  (cond) ? (void)0 : ::sluice::base::LogVoidify() & LOG(FATAL) << "Check failed: " #cond " "
