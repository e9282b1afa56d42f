// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/command_line.h"

#include <cstdio>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

namespace sluice::cli {

const char* const kSluiceVersion = SLUICE_VERSION;

namespace {

// Go's strconv.ParseBool, which pflag and verflag use; nullopt for anything else.
std::optional<bool> ParseGoBool(const std::string& s) {
  for (const char* t : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (s == t) {
      return true;
    }
  }
  for (const char* f : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (s == f) {
      return false;
    }
  }
  return std::nullopt;
}

Outcome Usage(Upstream upstream, const base::FlagSet& flags, const absl::Status& status) {
  const std::string error = absl::StrCat("Error: ", std::string(status.message()), "\n");
  // cli.Run prints the usage first so that the error is the last line on the screen; plain
  // cobra prints the error first.
  if (upstream == Upstream::kKubeProxy) {
    return {kExitFailure, "", absl::StrCat(flags.Help(), "\n", error)};
  }
  return {kExitFailure, "", absl::StrCat(error, flags.Help(), "\n")};
}

}  // namespace

bool StandardFlags::Asked() const {
  return help || (!version.empty() && ParseGoBool(version) != std::optional<bool>(false));
}

void RegisterStandardFlags(base::FlagSet& flags, StandardFlags& standard, Upstream upstream) {
  flags.Bool("help", &standard.help, "help for " + flags.program());
  flags.SetShorthand("help", 'h');
  flags.String("version", &standard.version,
               upstream == Upstream::kKubeProxy
                   ? "Print version information and quit (--version=raw: as a Go struct)"
                   : "(sluice) Print the version and quit");
  flags.SetImplied("version", "true");
}

Outcome AfterParse(Upstream upstream, const base::FlagSet& flags, const StandardFlags& standard,
                   const absl::Status& parsed, const VersionText& version) {
  if (!parsed.ok()) {
    return Usage(upstream, flags, parsed);
  }
  const bool raw = upstream == Upstream::kKubeProxy && standard.version == "raw";
  const std::optional<bool> asked =
      standard.version.empty() ? std::optional<bool>(false) : ParseGoBool(standard.version);
  if (!raw && !asked) {
    return Usage(upstream, flags,
                 absl::InvalidArgumentError(absl::StrCat(
                     "invalid value \"", standard.version, "\" for flag --version: ",
                     upstream == Upstream::kKubeProxy ? "true, false or raw" : "true or false")));
  }
  if (standard.help) {
    return {kExitOk, flags.Help(), ""};
  }
  if (raw || *asked) {
    return {kExitOk, version(raw ? "raw" : "true") + "\n", ""};
  }
  return {};
}

Outcome Rejected(Upstream upstream, const base::FlagSet& flags, const absl::Status& status) {
  if (upstream == Upstream::kKonnectivity) {
    return Usage(upstream, flags, status);
  }
  // component-base's cli.Run: klog.ErrorS(err, "command failed").
  return {kExitFailure, "", "",
          absl::StrCat("\"command failed\" err=\"", absl::CEscape(status.message()), "\"")};
}

std::optional<int> Finish(const Outcome& outcome) {
  std::fputs(outcome.out.c_str(), stdout);
  std::fputs(outcome.err.c_str(), stderr);
  if (!outcome.log.empty()) {
    LOG(ERROR) << outcome.log;
  }
  std::fflush(stdout);
  return outcome.exit_code;
}

}  // namespace sluice::cli
