// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "lib/base/flags.h"

namespace sluice::base {

// One row of a binary's option table: everything sluice knows about one flag, written once.
// Flag registration (and so --help and the flat --config file), the report of accepted but
// unused flags, the KubeProxyConfiguration mapping and the docs tables all read the rows; a test
// (tests/options_docs_test.cc) compares the docs with the tables. Rows point into the binary's
// options struct, whose member initialisers are the defaults.
struct Option {
  using Value = std::variant<std::string*, int64_t*, double*, bool*, absl::Duration*,
                             std::vector<std::string>*>;
  enum Trait : unsigned {
    kRepeated = 1,   // a list flag whose every occurrence is one value (FlagSet::Repeated)
    kFileWins = 2,   // sluice-agent: a KubeProxyConfiguration file replaces the flag
    kGoPointer = 4,  // the upstream file field is a Go pointer: a zero there is a value
    kNoWrite = 8,    // sluice-agent: the field is not written by --write-config-to
  };
  enum class Origin { kSluice, kUpstream, kKlog };

  std::string_view name;  // dashed flag name
  Value value;
  std::string_view help;
  Origin origin = Origin::kSluice;
  // The upstream setting it stands for where that is not the flag of the same name: a
  // KubeProxyConfiguration field path (sluice-agent). Empty: none, or the same flag upstream.
  std::string_view maps_to = {};
  // Non-empty: accepted for upstream's sake but means nothing to sluice; reported once, with
  // this reason, when set to something other than its default.
  std::string_view why = {};
  unsigned traits = 0;

  bool reported() const { return !why.empty(); }
};

// Registers every row on `flags`; each variable's current value is the flag's default.
void RegisterOptions(FlagSet& flags, std::span<const Option> table);

// The row named `name` (dashed), or null.
const Option* FindOption(std::span<const Option> table, std::string_view name);

// One line for each row of `origin` that is reported() and was set to something other than its
// default: "--NAME (MAPS_TO) is accepted for compatibility with UPSTREAM and has no effect: WHY".
std::vector<std::string> Unapplied(const FlagSet& flags, std::span<const Option> table,
                                   Option::Origin origin, std::string_view upstream);

// The table as a markdown table (one row per option, in table order) for docs/: flag, type,
// default (as --help prints it), what the flag maps to upstream (`upstream_header` names that
// column), whether sluice uses it, and the help text. `flags` has the rows registered with
// their defaults.
std::string OptionsMarkdown(std::span<const Option> table, const FlagSet& flags,
                            std::string_view upstream_header);

}  // namespace sluice::base
