// SPDX-License-Identifier: Apache-2.0
#include "lib/base/flags.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/strings.h"

namespace sluice::base {

std::string CanonicalFlagName(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_') {
      out.push_back('-');
    } else if (std::isupper(static_cast<unsigned char>(c))) {
      if (!out.empty() && out.back() != '-') {
        out.push_back('-');
      }
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

FlagSet::FlagSet(std::string program) : program_(std::move(program)) {}

void FlagSet::Add(std::string_view name, Kind kind, void* dst, std::string_view help) {
  Flag flag{kind, dst, std::string(help), "", Origin::kDefault};
  flag.default_text = Format(flag);
  flags_.emplace(CanonicalFlagName(name), std::move(flag));
}

void FlagSet::String(std::string_view name, std::string* dst, std::string_view help) {
  Add(name, Kind::kString, dst, help);
}
void FlagSet::Int(std::string_view name, int64_t* dst, std::string_view help) {
  Add(name, Kind::kInt, dst, help);
}
void FlagSet::Double(std::string_view name, double* dst, std::string_view help) {
  Add(name, Kind::kDouble, dst, help);
}
void FlagSet::Bool(std::string_view name, bool* dst, std::string_view help) {
  Add(name, Kind::kBool, dst, help);
}
void FlagSet::Duration(std::string_view name, absl::Duration* dst, std::string_view help) {
  Add(name, Kind::kDuration, dst, help);
}
void FlagSet::List(std::string_view name, std::vector<std::string>* dst, std::string_view help) {
  Add(name, Kind::kList, dst, help);
}
void FlagSet::Repeated(std::string_view name, std::vector<std::string>* dst,
                       std::string_view help) {
  Add(name, Kind::kRepeated, dst, help);
}

void FlagSet::SetImplied(std::string_view name, std::string implied) {
  flags_.at(CanonicalFlagName(name)).implied = std::move(implied);
}

void FlagSet::SetShorthand(std::string_view name, char c) {
  const std::string canonical = CanonicalFlagName(name);
  flags_.at(canonical).shorthand = c;
  shorthands_[c] = canonical;
}

const FlagSet::Flag* FlagSet::FindOnCommandLine(std::string_view name,
                                                std::string* canonical) const {
  const Flag* flag = Find(name, canonical);
  if (flag == nullptr && name.size() == 1) {
    if (auto it = shorthands_.find(name[0]); it != shorthands_.end()) {
      *canonical = it->second;
      flag = &flags_.at(it->second);
    }
  }
  return flag;
}

const FlagSet::Flag* FlagSet::Find(std::string_view name, std::string* canonical) const {
  *canonical = CanonicalFlagName(name);
  auto it = flags_.find(*canonical);
  return it == flags_.end() ? nullptr : &it->second;
}

bool FlagSet::Has(std::string_view name) const {
  std::string canonical;
  return Find(name, &canonical) != nullptr;
}

bool FlagSet::IsSet(std::string_view name) const {
  std::string canonical;
  const Flag* flag = Find(name, &canonical);
  return flag != nullptr && flag->origin != Origin::kDefault;
}

bool FlagSet::Changed(std::string_view name) const {
  std::string canonical;
  const Flag* flag = Find(name, &canonical);
  return flag != nullptr && flag->origin != Origin::kDefault && Format(*flag) != flag->default_text;
}

absl::Status FlagSet::Assign(Flag& flag, std::string_view value) {
  const std::string v(value);
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.dst) = v;
      return absl::OkStatus();
    case Kind::kInt: {
      int64_t n;
      if (!absl::SimpleAtoi(v, &n)) {
        return absl::InvalidArgumentError("not an integer");
      }
      *static_cast<int64_t*>(flag.dst) = n;
      return absl::OkStatus();
    }
    case Kind::kDouble: {
      double d;
      if (!absl::SimpleAtod(v, &d)) {
        return absl::InvalidArgumentError("not a number");
      }
      *static_cast<double*>(flag.dst) = d;
      return absl::OkStatus();
    }
    case Kind::kBool: {
      bool b;
      if (!absl::SimpleAtob(v, &b)) {
        return absl::InvalidArgumentError("not a boolean (true or false)");
      }
      *static_cast<bool*>(flag.dst) = b;
      return absl::OkStatus();
    }
    case Kind::kDuration: {
      absl::Duration d;
      if (!absl::ParseDuration(v, &d) || d < absl::ZeroDuration() ||
          d == absl::InfiniteDuration()) {
        return absl::InvalidArgumentError(
            "not a non-negative duration such as 30s, 1m30s, 250ms or 1h0m0s");
      }
      *static_cast<absl::Duration*>(flag.dst) = d;
      return absl::OkStatus();
    }
    case Kind::kList: {
      auto* list = static_cast<std::vector<std::string>*>(flag.dst);
      if (flag.origin == Origin::kDefault) {
        list->clear();  // the first explicit value replaces the default
      }
      // Debian's abseil has its own string_view type (not std::string_view).
      absl::string_view s = absl::StripAsciiWhitespace(Absl(value));
      if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
        s = s.substr(1, s.size() - 2);  // pflag prints lists as [a,b]; "[]" is the empty list
      }
      for (absl::string_view item : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
        list->emplace_back(absl::StripAsciiWhitespace(item));
      }
      return absl::OkStatus();
    }
    case Kind::kRepeated: {
      auto* list = static_cast<std::vector<std::string>*>(flag.dst);
      if (flag.origin == Origin::kDefault) {
        list->clear();
      }
      if (v.empty()) {
        return absl::InvalidArgumentError("empty value");
      }
      list->push_back(v);
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown flag kind");
}

absl::Status FlagSet::Set(std::string_view name, std::string_view value, Origin origin) {
  std::string canonical = CanonicalFlagName(name);
  auto it = flags_.find(canonical);
  if (it == flags_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown flag --", canonical, " (see ", program_, " --help)"));
  }
  Flag& flag = it->second;
  if (origin == Origin::kConfigFile && flag.origin == Origin::kCommandLine) {
    return absl::OkStatus();
  }
  // A config file's list replaces the default; command-line occurrences then replace the file's.
  if (origin == Origin::kCommandLine && flag.origin == Origin::kConfigFile) {
    flag.origin = Origin::kDefault;
  }
  if (absl::Status st = Assign(flag, value); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid value \"", std::string(value),
                                                   "\" for flag --", canonical, ": ",
                                                   std::string(st.message())));
  }
  flag.origin = origin;
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv,
                            const std::function<bool(const std::string&)>& skip) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      if (i + 1 < argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected argument \"", argv[i + 1], "\""));
      }
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", std::string(arg),
                                                     "\" (flags look like --name=value)"));
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    std::string canonical;
    const Flag* flag = FindOnCommandLine(name, &canonical);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", canonical, " (see ", program_, " --help)"));
    }
    if (!has_value) {
      if (!flag->implied.empty()) {
        value = flag->implied;
      } else if (flag->kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", canonical, " needs a value"));
      }
    }
    if (skip && skip(canonical)) {
      continue;
    }
    if (absl::Status st = Set(canonical, value, Origin::kCommandLine); !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Format(const Flag& flag) {
  switch (flag.kind) {
    case Kind::kString:
      return absl::StrCat("\"", *static_cast<std::string*>(flag.dst), "\"");
    case Kind::kInt:
      return absl::StrCat(*static_cast<int64_t*>(flag.dst));
    case Kind::kDouble:
      return absl::StrCat(*static_cast<double*>(flag.dst));
    case Kind::kBool:
      return *static_cast<bool*>(flag.dst) ? "true" : "false";
    case Kind::kDuration:
      return absl::FormatDuration(*static_cast<absl::Duration*>(flag.dst));
    case Kind::kList:
    case Kind::kRepeated:
      return absl::StrCat(
          "[", absl::StrJoin(*static_cast<std::vector<std::string>*>(flag.dst), ","), "]");
  }
  return "";
}

namespace {
constexpr const char* kTypes[] = {"string", "int", "", "duration", "strings", "string", "float"};
}  // namespace

std::string FlagSet::TypeName(std::string_view name) const {
  std::string canonical;
  const Flag* flag = Find(name, &canonical);
  return flag == nullptr ? "" : kTypes[static_cast<int>(flag->kind)];
}

std::string FlagSet::DefaultText(std::string_view name) const {
  std::string canonical;
  const Flag* flag = Find(name, &canonical);
  return flag == nullptr ? "" : flag->default_text;
}

std::string FlagSet::Help() const {
  static constexpr const char* kZero[] = {"\"\"", "0", "false", "0", "[]", "[]", "0"};
  std::string out = absl::StrCat("Usage: ", program_, " [flags]\n\nFlags:\n");
  for (const auto& [name, flag] : flags_) {
    const int kind = static_cast<int>(flag.kind);
    const char* type = kTypes[kind];
    absl::StrAppend(
        &out, "  ", flag.shorthand ? absl::StrCat("-", std::string(1, flag.shorthand), ", ") : "",
        "--", name, *type ? " " : "", type,
        flag.implied.empty() ? "" : absl::StrCat("[=", flag.implied, "]"), "\n      ", flag.help);
    if (flag.kind == Kind::kRepeated) {
      absl::StrAppend(&out, " (repeatable)");
    } else if (flag.kind == Kind::kList) {
      absl::StrAppend(&out, " (comma-separated, repeatable)");
    }
    // Printing "(default 0)" after a help text that already says "(default: random)" showed
    // two defaults; pflag leaves zero defaults out for the same reason.
    if (flag.default_text != kZero[kind] && flag.help.find("(default") == std::string::npos) {
      absl::StrAppend(&out, " (default ", flag.default_text, ")");
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace sluice::base
