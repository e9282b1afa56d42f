// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "lib/base/flags.h"
#include "lib/base/klog.h"
#include "lib/cli/command_line.h"

namespace sluice::cli {

// One binary's main, as Main runs it. Everything referenced outlives Main.
struct Program {
  Upstream upstream;
  base::FlagSet& flags;  // every option registered, RegisterStandardFlags included
  const StandardFlags& standard;
  VersionText version;
  // Once argv is parsed: completes and checks the options (config files, cross-flag checks). An
  // error is a rejected configuration.
  std::function<absl::Status()> configure;
  const base::KlogFlags& klog;  // read after configure
  // The binary itself, with logging set up as klog's flags say and SIGTERM and SIGINT blocked
  // (cli/shutdown.h waits for them); returns the exit code.
  std::function<int()> run;
};

// The main of every sluice binary: blocks the shutdown signals before any thread starts, parses
// argv, answers --help, -h, --version and a bad command line or configuration as the upstream
// program does (exit 0 or 1), starts log output, then runs the program.
int Main(int argc, char** argv, const Program& program);

}  // namespace sluice::cli
