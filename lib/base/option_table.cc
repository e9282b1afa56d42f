// SPDX-License-Identifier: Apache-2.0
#include "lib/base/option_table.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "lib/base/strings.h"

namespace sluice::base {

namespace {

struct Registrar {
  FlagSet& flags;
  const Option& row;
  void operator()(std::string* v) const { flags.String(row.name, v, row.help); }
  void operator()(int64_t* v) const { flags.Int(row.name, v, row.help); }
  void operator()(double* v) const { flags.Double(row.name, v, row.help); }
  void operator()(bool* v) const { flags.Bool(row.name, v, row.help); }
  void operator()(absl::Duration* v) const { flags.Duration(row.name, v, row.help); }
  void operator()(std::vector<std::string>* v) const {
    if (row.traits & Option::kRepeated) {
      flags.Repeated(row.name, v, row.help);
    } else {
      flags.List(row.name, v, row.help);
    }
  }
};

// A markdown table cell: pipes escaped, so help texts may contain them.
std::string Cell(std::string_view text) { return absl::StrReplaceAll(Absl(text), {{"|", "\\|"}}); }

}  // namespace

void RegisterOptions(FlagSet& flags, std::span<const Option> table) {
  for (const Option& row : table) {
    std::visit(Registrar{flags, row}, row.value);
  }
}

const Option* FindOption(std::span<const Option> table, std::string_view name) {
  for (const Option& row : table) {
    if (row.name == name) {
      return &row;
    }
  }
  return nullptr;
}

std::vector<std::string> Unapplied(const FlagSet& flags, std::span<const Option> table,
                                   Option::Origin origin, std::string_view upstream) {
  std::vector<std::string> out;
  for (const Option& row : table) {
    if (row.origin == origin && row.reported() && flags.Changed(row.name)) {
      out.push_back(
          absl::StrCat("--", Absl(row.name),
                       row.maps_to.empty() ? "" : absl::StrCat(" (", Absl(row.maps_to), ")"),
                       " is accepted for compatibility with ", Absl(upstream),
                       " and has no effect: ", Absl(row.why)));
    }
  }
  return out;
}

std::string OptionsMarkdown(std::span<const Option> table, const FlagSet& flags,
                            std::string_view upstream_header) {
  std::string out = absl::StrCat("| flag | type | default | ", Absl(upstream_header),
                                 " | in sluice | meaning |\n|---|---|---|---|---|---|\n");
  for (const Option& row : table) {
    std::string type = flags.TypeName(row.name);
    std::string origin;
    switch (row.origin) {
      case Option::Origin::kSluice:
        origin = "—";
        break;
      case Option::Origin::kUpstream:
        origin = row.maps_to.empty() ? "flag" : absl::StrCat("`", Absl(row.maps_to), "`");
        break;
      case Option::Origin::kKlog:
        origin = row.maps_to.empty() ? "klog" : absl::StrCat("klog, `", Absl(row.maps_to), "`");
        break;
    }
    absl::StrAppend(&out, "| `--", Absl(row.name), "` | ", type.empty() ? "bool" : type, " | `",
                    Cell(flags.DefaultText(row.name)), "` | ", origin, " | ",
                    row.reported() ? absl::StrCat("reported: ", Cell(row.why)) : "used", " | ",
                    Cell(row.help), " |\n");
  }
  return out;
}

}  // namespace sluice::base
