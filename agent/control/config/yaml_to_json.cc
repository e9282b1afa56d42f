// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/yaml_to_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace sluice::config {
namespace {

// Kubernetes objects nest about ten levels; this only stops runaway input and alias cycles.
constexpr int kMaxDepth = 512;

absl::Status ErrorAt(const YAML::Mark& mark, std::string_view message) {
  if (mark.is_null()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", base::Absl(message)));
  }
  return absl::InvalidArgumentError(absl::StrCat("invalid YAML at line ", mark.line + 1,
                                                 ", column ", mark.column + 1, ": ",
                                                 base::Absl(message)));
}

// yaml-cpp 0.7's LoadAll never returns on a document that consumes no token (a stray ',' at the
// top level: jbeder/yaml-cpp#1040, fixed after 0.7 by #1319): it appends null documents until
// memory runs out. A first pass with this no-op handler finds that document, which starts where
// the previous one did; every other document starts past its predecessor.
class DocumentStarts final : public YAML::EventHandler {
 public:
  YAML::Mark start;

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Throws YAML::Exception on a syntax error, as LoadAll would.
absl::Status CheckDocumentsAdvance(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts handler;
  int previous = -1;
  while (parser.HandleNextDocument(handler)) {
    if (handler.start.pos == previous) {
      return ErrorAt(handler.start, absl::StrCat("unexpected '", text.substr(previous, 1), "'"));
    }
    previous = handler.start.pos;
  }
  return absl::OkStatus();
}

bool IsDigit(char c, int base) {
  if (base == 16) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  return c >= '0' && c < '0' + base;
}

size_t CountDigits(std::string_view s, size_t from) {
  size_t n = 0;
  while (from + n < s.size() && IsDigit(s[from + n], 10)) {
    ++n;
  }
  return n;
}

// YAML 1.2 core schema ints: [-+]?[0-9]+, 0o[0-7]+, 0x[0-9a-fA-F]+. False when `s` is not one
// or does not fit 64 bits (a decimal then reads as a float, like go-yaml).
bool WriteInteger(std::string_view s, std::string& out) {
  int base = 10;
  bool negative = false;
  std::string_view digits = s;
  if (s.starts_with("0x") || s.starts_with("0o")) {
    base = s[1] == 'x' ? 16 : 8;
    digits.remove_prefix(2);
  } else if (s.starts_with('-') || s.starts_with('+')) {
    negative = s[0] == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty()) {
    return false;
  }
  for (char c : digits) {
    if (!IsDigit(c, base)) {
      return false;
    }
  }
  uint64_t value = 0;
  auto parsed = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (parsed.ec != std::errc() || (negative && value > (uint64_t{1} << 63))) {
    return false;
  }
  char buf[24];
  auto written = std::to_chars(buf, buf + sizeof(buf), value);
  if (negative) {
    out += '-';
  }
  out.append(buf, written.ptr);
  return true;
}

// YAML 1.2 core schema floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?. Written
// with a '.' or exponent so that the decoder still sees a float ("expected integer, got float"
// for `port: 80.0`). .inf and .nan have no JSON form and stay strings.
bool WriteFloat(std::string_view s, std::string& out) {
  std::string_view number = s.starts_with('+') ? s.substr(1) : s;
  size_t i = number.starts_with('-') ? 1 : 0;
  size_t mantissa = CountDigits(number, i);
  i += mantissa;
  if (i < number.size() && number[i] == '.') {
    size_t fraction = CountDigits(number, i + 1);
    mantissa += fraction;
    i += 1 + fraction;
  }
  if (mantissa == 0) {
    return false;
  }
  if (i < number.size() && (number[i] == 'e' || number[i] == 'E')) {
    ++i;
    if (i < number.size() && (number[i] == '-' || number[i] == '+')) {
      ++i;
    }
    size_t exponent = CountDigits(number, i);
    if (exponent == 0) {
      return false;
    }
    i += exponent;
  }
  double value = 0;
  const char* end = number.data() + number.size();
  auto parsed = std::from_chars(number.data(), end, value);
  if (i != number.size() || parsed.ec != std::errc() || parsed.ptr != end ||
      !std::isfinite(value)) {
    return false;
  }
  char buf[32];
  auto written = std::to_chars(buf, buf + sizeof(buf), value);
  std::string_view text(buf, written.ptr - buf);
  out.append(text);
  if (text.find_first_of(".e") == std::string_view::npos) {
    out += ".0";
  }
  return true;
}

// https://yaml.org/spec/1.2.2/#1032-tag-resolution (core schema). YAML 1.1 spellings such as
// yes/no/on/off stay strings.
void WritePlainScalar(std::string_view s, std::string& out) {
  if (s == "true" || s == "True" || s == "TRUE") {
    out += "true";
  } else if (s == "false" || s == "False" || s == "FALSE") {
    out += "false";
  } else if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    out += "null";
  } else if (!WriteInteger(s, out) && !WriteFloat(s, out)) {
    base::AppendJsonString(s, out);
  }
}

// Writes the nodes of one document as JSON text. Thread: the caller's.
class Converter final {
 public:
  explicit Converter(size_t limit) : limit_(limit) {}

  absl::StatusOr<std::string> Convert(const YAML::Node& document) {
    out_.clear();
    RETURN_IF_ERROR(Write(document, 0));
    used_ += out_.size();
    return std::move(out_);
  }

 private:
  using KeySet = absl::flat_hash_set<std::string_view>;

  absl::Status Write(const YAML::Node& node, int depth) {
    if (depth > kMaxDepth) {
      return ErrorAt(node.Mark(), absl::StrCat("nested deeper than ", kMaxDepth,
                                               " levels (a recursive alias?)"));
    }
    if (used_ + out_.size() > limit_) {
      return ErrorAt(node.Mark(),
                     absl::StrCat("aliases expand to more than ", limit_, " bytes of JSON"));
    }
    switch (node.Type()) {
      case YAML::NodeType::Map: {
        out_ += '{';
        KeySet keys;
        RETURN_IF_ERROR(WriteEntries(node, keys, /*merged=*/false, depth));
        out_ += '}';
        return absl::OkStatus();
      }
      case YAML::NodeType::Sequence:
        return WriteSequence(node, depth);
      case YAML::NodeType::Scalar:
        WriteScalar(node);
        return absl::OkStatus();
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        out_ += "null";
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status WriteSequence(const YAML::Node& node, int depth) {
    out_ += '[';
    bool first = true;
    for (const auto& item : node) {
      if (!first) {
        out_ += ',';
      }
      first = false;
      RETURN_IF_ERROR(Write(item, depth + 1));
    }
    out_ += ']';
    return absl::OkStatus();
  }

  // Writes the members of `map` not yet in `keys`. Merge keys are applied after the mapping's
  // own keys, so those win wherever the `<<` stands (https://yaml.org/type/merge.html).
  absl::Status WriteEntries(const YAML::Node& map, KeySet& keys, bool merged, int depth) {
    std::vector<YAML::Node> merges;
    for (const auto& entry : map) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar() && !key.IsNull()) {
        return ErrorAt(key.Mark(), "a mapping key must be a scalar");
      }
      // The scalar lives in the document's node memory, which outlives this conversion.
      std::string_view name = key.IsNull() ? std::string_view("null") : key.Scalar();
      if (name == "<<" && key.Tag() == "?") {
        merges.push_back(entry.second);
        continue;
      }
      if (!keys.insert(name).second) {
        if (merged) {
          continue;
        }
        return ErrorAt(key.Mark(), absl::StrCat("duplicate key \"", base::Absl(name), "\""));
      }
      if (out_.back() != '{') {
        out_ += ',';
      }
      base::AppendJsonString(name, out_);
      out_ += ':';
      RETURN_IF_ERROR(Write(entry.second, depth + 1));
    }
    for (const YAML::Node& merge : merges) {
      RETURN_IF_ERROR(WriteMerge(merge, keys, depth + 1));
    }
    return absl::OkStatus();
  }

  absl::Status WriteMerge(const YAML::Node& source, KeySet& keys, int depth) {
    if (source.IsMap()) {
      return WriteEntries(source, keys, /*merged=*/true, depth);
    }
    if (!source.IsSequence()) {
      return ErrorAt(source.Mark(), "a merge key (<<) takes a mapping or a list of mappings");
    }
    // Earlier mappings in the list win.
    for (const auto& item : source) {
      if (!item.IsMap()) {
        return ErrorAt(item.Mark(), "a merge key (<<) takes a mapping or a list of mappings");
      }
      RETURN_IF_ERROR(WriteEntries(item, keys, /*merged=*/true, depth + 1));
    }
    return absl::OkStatus();
  }

  void WriteScalar(const YAML::Node& node) {
    const std::string& tag = node.Tag();
    // "?" marks a plain scalar, "!" a quoted or block one; explicit core tags other than !!str
    // (!!int "80") resolve like plain text; anything else (!Ref, !!binary) stays a string.
    bool plain =
        tag == "?" || (tag.starts_with("tag:yaml.org,2002:") && tag != "tag:yaml.org,2002:str");
    if (plain) {
      WritePlainScalar(node.Scalar(), out_);
    } else {
      base::AppendJsonString(node.Scalar(), out_);
    }
  }

  size_t limit_;
  size_t used_ = 0;  // bytes of earlier documents
  std::string out_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> YamlToJson(std::string_view text) {
  // yaml-cpp reports errors by throwing (YAML::ParserException carries the mark); no exception
  // may leave this function.
  try {
    const std::string copy(text);
    RETURN_IF_ERROR(CheckDocumentsAdvance(copy));
    std::vector<YAML::Node> documents = YAML::LoadAll(copy);
    Converter converter(16 * text.size() + (size_t{1} << 20));
    std::vector<std::string> out;
    out.reserve(documents.size());
    for (const YAML::Node& document : documents) {
      ASSIGN_OR_RETURN(std::string json, converter.Convert(document));
      out.push_back(std::move(json));
    }
    return out;
  } catch (const YAML::Exception& e) {
    return ErrorAt(e.mark, e.msg);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("YAML: out of memory");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.what()));
  }
}

}  // namespace sluice::config
