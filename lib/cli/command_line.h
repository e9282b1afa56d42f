// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "lib/base/flags.h"

// What every sluice binary does around parsing its command line, shaped after the upstream
// program it stands in for, so that scripts and operators see the answers they know.
namespace sluice::cli {

// The upstream command-line behaviour a binary matches.
enum class Upstream {
  // kube-proxy: cobra run by component-base's cli.Run. A bad command line prints the usage and
  // then "Error: ..."; a configuration rejected after parsing is a logged "command failed".
  kKubeProxy,
  // Konnectivity's proxy-server and proxy-agent: plain cobra. Any rejected option prints
  // "Error: ..." and then the usage.
  kKonnectivity,
};

// sluice's own version (the project's).
extern const char* const kSluiceVersion;

inline constexpr int kExitOk = 0;
// Upstream's only failure code: cobra's callers all exit 1.
inline constexpr int kExitFailure = 1;

// --help (-h) and --version, as every binary registers them.
struct StandardFlags {
  bool help = false;
  std::string version;  // "" or "false": not asked; "true" (bare --version) or "raw"
  // Help or the version is asked for, or --version has a bad value (AfterParse reports it).
  bool Asked() const;
};
void RegisterStandardFlags(base::FlagSet& flags, StandardFlags& standard, Upstream upstream);

// What --version prints for `how`: "true", or "raw" (kube-proxy's --version=raw).
using VersionText = std::function<std::string(const std::string& how)>;

// What the process prints and whether it ends, once its command line is parsed.
struct Outcome {
  std::optional<int> exit_code;  // unset: go on and run
  std::string out;               // for stdout
  std::string err;               // for stderr
  std::string log;               // logged at ERROR
};

// After FlagSet::Parse (`parsed` is its result): a bad command line (an unknown flag, a bad
// value, a bad --version) ends with the usage and the error; then --help, then --version end
// with their text (cobra answers help before the command runs, kube-proxy's version first
// thing in it). Pure, for tests; Finish prints.
Outcome AfterParse(Upstream upstream, const base::FlagSet& flags, const StandardFlags& standard,
                   const absl::Status& parsed, const VersionText& version);
// A configuration rejected after parsing (validation, a config file): kube-proxy logs it (the
// usage would bury it), Konnectivity prints it with the usage.
Outcome Rejected(Upstream upstream, const base::FlagSet& flags, const absl::Status& status);

// Prints the outcome's texts; returns its exit code.
std::optional<int> Finish(const Outcome& outcome);

}  // namespace sluice::cli
