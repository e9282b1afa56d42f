// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/flags.h"
#include "lib/base/option_table.h"
#include "lib/base/unique_fd.h"

namespace sluice::base {

// klog's flags (k8s.io/klog/v2 InitFlags) as upstream Kubernetes components register them
// (underscores turned into dashes), with klog's defaults, so their manifests start.
struct KlogFlags {
  bool logtostderr = true;
  bool alsologtostderr = false;
  std::string log_file;
  std::string log_dir;
  int64_t log_file_max_size = 1800;   // MB; 0 = unlimited
  std::string stderrthreshold = "2";  // ERROR
  bool skip_headers = false;
  bool add_dir_header = false;
  bool one_output = false;
  bool skip_log_headers = false;
  std::string vmodule;
  std::string log_backtrace_at = ":0";
  int64_t v = 0;
};

// klog's rows of a binary's option table (lib/base/option_table.h), pointing into `k`.
std::vector<Option> KlogOptions(KlogFlags& k);
void RegisterKlogFlags(FlagSet& flags, KlogFlags& k);

// A flag accepted only so that upstream's manifests start; sluice does not act on it.
struct IgnoredFlag {
  std::string_view name;
  std::string_view why;
};

// One warning per ignored flag that was set to something other than its default: an operator
// who asked for it learns it does nothing, and one who copied upstream's defaults is not nagged.
// Covers klog's unsupported flags, `own` and `shared`; `upstream` names where the flags come from.
void WarnIgnoredFlags(const FlagSet& flags, std::string_view upstream,
                      std::span<const IgnoredFlag> own, std::span<const IgnoredFlag> shared = {});

// Sends the process's log lines (everything written to stderr: ours and gRPC's) where klog's
// flags say: with --logtostderr=false to --log-file (or PROGRAM.log in --log-dir, or in $TMPDIR
// as klog does), cut back to empty at --log-file-max-size (klog starts a new file), and to
// stderr too for --alsologtostderr or lines at --stderrthreshold or above; --skip-headers drops
// the "I0102 15:04:05.000000 tid file:line] " prefix. Sets the verbosity (-v).
// When none of that is asked for it does nothing; otherwise stderr is a pipe read by a thread
// that lives as long as this object. Thread: its own (the copy thread); create and destroy on
// the main thread.
class LogOutput final {
 public:
  static absl::StatusOr<std::unique_ptr<LogOutput>> Start(const KlogFlags& k,
                                                          std::string_view program);
  ~LogOutput();  // puts stderr back and copies what is still in the pipe
  LogOutput(const LogOutput&) = delete;
  LogOutput& operator=(const LogOutput&) = delete;

 private:
  LogOutput(const KlogFlags& k, int threshold, UniqueFd file, UniqueFd saved_stderr,
            UniqueFd pipe_read);
  void Copy();
  void Line(std::string_view line);

  const bool to_file_;
  const bool also_stderr_;
  const bool skip_headers_;
  const int threshold_;
  const uint64_t max_bytes_;
  uint64_t written_ = 0;
  UniqueFd file_;
  UniqueFd saved_stderr_;  // the real stderr while ours is the pipe
  UniqueFd pipe_read_;
  std::thread thread_;
};

}  // namespace sluice::base
