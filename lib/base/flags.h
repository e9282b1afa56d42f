// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace sluice::base {

// A small pflag-compatible command line parser shared by every sluice binary, so the flag
// spellings kube-proxy and Konnectivity users already type keep working: `--a-flag=v`,
// `--a-flag v`, `--a_flag`, `-a-flag`, bare `--bool-flag`, Go durations ("1h0m0s", "100ms"),
// comma lists with a literal `[]` for an empty list, and repeatable flags.
// Each registered variable keeps its value as the default. Thread: the caller's (startup only).
class FlagSet final {
 public:
  enum class Origin { kDefault, kConfigFile, kCommandLine };

  explicit FlagSet(std::string program);

  void String(std::string_view name, std::string* dst, std::string_view help);
  void Int(std::string_view name, int64_t* dst, std::string_view help);
  void Double(std::string_view name, double* dst, std::string_view help);
  void Bool(std::string_view name, bool* dst, std::string_view help);
  void Duration(std::string_view name, absl::Duration* dst, std::string_view help);
  // Comma-separated; repeating the flag appends (pflag StringSlice semantics).
  void List(std::string_view name, std::vector<std::string>* dst, std::string_view help);
  // Each occurrence adds one value, commas included (for values such as "etcd:URL,URL").
  void Repeated(std::string_view name, std::vector<std::string>* dst, std::string_view help);
  // pflag's NoOptDefVal: a bare `--name` means `implied`, so the next argument is never its
  // value; `--name=value` gives another. For a registered flag.
  void SetImplied(std::string_view name, std::string implied);
  // `-c` spells `--name` too (pflag's shorthand, as cobra's -h for --help). For a registered flag.
  void SetShorthand(std::string_view name, char c);

  // Parses argv[1..]. Errors name the flag and the bad value. Positional arguments are errors.
  // A flag for which `skip` (given its dashed name) returns true is consumed but not set.
  absl::Status Parse(int argc, char** argv,
                     const std::function<bool(const std::string&)>& skip = nullptr);
  // Sets one flag by name (any spelling, camelCase too). A value from kConfigFile never
  // overrides one given on the command line.
  absl::Status Set(std::string_view name, std::string_view value, Origin origin);
  bool IsSet(std::string_view name) const;
  bool Has(std::string_view name) const;
  // Set (command line or config file) to something other than its default, so a flag that is
  // accepted only for compatibility can be reported when it asks for something.
  bool Changed(std::string_view name) const;

  // Every flag with its type, default and help, sorted by name. Like pflag, a zero default
  // ("", 0, false, [], 0s) is not printed, nor one the help text already states.
  std::string Help() const;
  // One flag's type as Help() prints it ("" for a bool) and its default as Help() formats it;
  // empty for an unknown flag.
  std::string TypeName(std::string_view name) const;
  std::string DefaultText(std::string_view name) const;
  const std::string& program() const { return program_; }

 private:
  enum class Kind { kString, kInt, kBool, kDuration, kList, kRepeated, kDouble };
  struct Flag {
    Kind kind;
    void* dst;
    std::string help;
    std::string default_text;
    Origin origin = Origin::kDefault;
    std::string implied;  // SetImplied
    char shorthand = 0;   // SetShorthand
  };

  void Add(std::string_view name, Kind kind, void* dst, std::string_view help);
  const Flag* Find(std::string_view name, std::string* canonical) const;
  // Find, then a one-letter name as a shorthand.
  const Flag* FindOnCommandLine(std::string_view name, std::string* canonical) const;
  static absl::Status Assign(Flag& flag, std::string_view value);
  static std::string Format(const Flag& flag);

  std::string program_;
  std::map<std::string, Flag> flags_;  // keyed by dashed name
  std::map<char, std::string> shorthands_;
};

// "sync_period", "syncPeriod" and "sync-period" all become "sync-period".
std::string CanonicalFlagName(std::string_view name);

}  // namespace sluice::base
