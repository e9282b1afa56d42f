// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/json_field.h"

#include <limits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/cord.h"

namespace sluice::config {
namespace {

using simdjson::dom::element_type;

// Status payload key of the field path; not a real type URL, only unique.
constexpr char kPathPayload[] = "sluice.dev/config.FieldPath";

const char* TypeName(element_type type) {
  switch (type) {
    case element_type::ARRAY:
      return "array";
    case element_type::OBJECT:
      return "object";
    case element_type::INT64:
    case element_type::UINT64:
      return "integer";
    case element_type::DOUBLE:
      return "float";
    case element_type::STRING:
      return "string";
    case element_type::BOOL:
      return "boolean";
    case element_type::NULL_VALUE:
      return "null";
  }
  return "unknown";
}

}  // namespace

Field Field::Member(std::string_view key, simdjson::dom::element value) const {
  return Field(value, this, Step::kMember, key, 0);
}

Field Field::Index(size_t index, simdjson::dom::element value) const {
  return Field(value, this, Step::kIndex, {}, index);
}

Field Field::MapKey(std::string_view key, simdjson::dom::element value) const {
  return Field(value, this, Step::kMapKey, key, 0);
}

std::string Field::Path() const {
  absl::InlinedVector<const Field*, 16> chain;
  for (const Field* f = this; f->step_ != Step::kRoot; f = f->parent_) {
    chain.push_back(f);
  }
  std::string path;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Field& f = **it;
    switch (f.step_) {
      case Step::kMember:
        if (!path.empty()) {
          path += '.';
        }
        path.append(f.key_);
        break;
      case Step::kIndex:
        absl::StrAppend(&path, "[", f.index_, "]");
        break;
      case Step::kMapKey:
        absl::StrAppend(&path, "[", base::Absl(f.key_), "]");
        break;
      case Step::kRoot:
        break;
    }
  }
  return path;
}

absl::Status Field::Error(std::string_view message) const {
  absl::Status status = absl::InvalidArgumentError(base::Absl(message));
  status.SetPayload(kPathPayload, absl::Cord(Path()));
  return status;
}

absl::Status Field::TypeError(std::string_view expected) const {
  return Error(absl::StrCat("expected ", base::Absl(expected), ", got ", TypeName(value_.type())));
}

absl::StatusOr<std::string_view> Field::String() const {
  std::string_view text;
  if (value_.get(text) != simdjson::SUCCESS) {
    return TypeError("string");
  }
  return text;
}

absl::StatusOr<bool> Field::Bool() const {
  bool b;
  if (value_.get(b) != simdjson::SUCCESS) {
    return TypeError("boolean");
  }
  return b;
}

absl::StatusOr<int> Field::Int(int min, int max) const {
  int64_t number = 0;
  uint64_t big = 0;
  if (value_.get(number) != simdjson::SUCCESS) {
    // Above INT64_MAX simdjson keeps it as UINT64: out of any range we ask for.
    if (value_.get(big) != simdjson::SUCCESS) {
      return TypeError("integer");
    }
    return Error(absl::StrCat("must be between ", min, " and ", max, ", got ", big));
  }
  if (number < min || number > max) {
    return Error(absl::StrCat("must be between ", min, " and ", max, ", got ", number));
  }
  return static_cast<int>(number);
}

absl::StatusOr<simdjson::dom::array> Field::Array() const {
  simdjson::dom::array array;
  if (value_.get(array) != simdjson::SUCCESS) {
    return TypeError("array");
  }
  return array;
}

std::string FieldPathOf(const absl::Status& status) {
  absl::optional<absl::Cord> path = status.GetPayload(kPathPayload);
  return path ? std::string(*path) : std::string();
}

absl::StatusOr<ObjectField> ObjectField::Of(const Field& field) {
  simdjson::dom::object object;
  if (field.value().get(object) != simdjson::SUCCESS) {
    return field.TypeError("object");
  }
  return ObjectField(object, field);
}

std::optional<Field> ObjectField::Get(std::string_view key) const {
  simdjson::dom::element value;
  if (object_.at_key(key).get(value) != simdjson::SUCCESS || value.is_null()) {
    return std::nullopt;
  }
  return field_.Member(key, value);
}

absl::StatusOr<Field> ObjectField::Require(std::string_view key) const {
  std::optional<Field> field = Get(key);
  if (!field) {
    return Error(key, "required");
  }
  return *field;
}

absl::StatusOr<std::optional<ObjectField>> ObjectField::GetObject(std::string_view key) const {
  std::optional<Field> field = Get(key);
  if (!field) {
    return std::nullopt;
  }
  ASSIGN_OR_RETURN(ObjectField object, Of(*field));
  return object;
}

absl::Status ObjectField::Error(std::string_view key, std::string_view message) const {
  return field_.Member(key, simdjson::dom::element()).Error(message);
}

absl::Status ObjectField::ReadString(std::string_view key, std::string* out) const {
  if (std::optional<Field> field = Get(key)) {
    ASSIGN_OR_RETURN(std::string_view text, field->String());
    out->assign(text);
  }
  return absl::OkStatus();
}

absl::Status ObjectField::ReadInt(std::string_view key, int min, int max, int* out) const {
  if (std::optional<Field> field = Get(key)) {
    ASSIGN_OR_RETURN(*out, field->Int(min, max));
  }
  return absl::OkStatus();
}

absl::Status ObjectField::ReadBool(std::string_view key, std::optional<bool>* out) const {
  if (std::optional<Field> field = Get(key)) {
    ASSIGN_OR_RETURN(*out, field->Bool());
  }
  return absl::OkStatus();
}

absl::Status ObjectField::ReadStringMap(std::string_view key,
                                        std::map<std::string, std::string>* out) const {
  ASSIGN_OR_RETURN(std::optional<ObjectField> map, GetObject(key));
  if (!map) {
    return absl::OkStatus();
  }
  for (simdjson::dom::key_value_pair member : map->object_) {
    Field value = map->field_.MapKey(member.key, member.value);
    std::string_view text;  // null stays "", as encoding/json leaves a map[string]string value
    if (!member.value.is_null()) {
      ASSIGN_OR_RETURN(text, value.String());
    }
    // First one wins on a duplicate key, as for every other member (at_key finds the first).
    out->try_emplace(std::string(member.key), text);
  }
  return absl::OkStatus();
}

}  // namespace sluice::config
