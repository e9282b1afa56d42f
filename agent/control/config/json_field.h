// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "simdjson.h"

// Typed, path-aware reading of parsed JSON for the manifest decoders (internal to config/).
// A failure is an InvalidArgument status whose message is the reason ("expected integer, got
// string") and whose field path ("spec.ports[0].port") travels as a payload, so DecodeError gets
// both without parsing text. Only simdjson's error-code API is used: nothing here throws.

namespace sluice::config {

// A JSON value and where it sits in its object. The path string is assembled only when an error
// is reported, so the success path allocates nothing. A Field points at its parent: it must not
// outlive the Field or ObjectField it was taken from. Thread: any (a view into one document).
class Field final {
 public:
  explicit Field(simdjson::dom::element value) : value_(value) {}

  const simdjson::dom::element& value() const { return value_; }
  Field Member(std::string_view key, simdjson::dom::element value) const;  // "parent.key"
  Field Index(size_t index, simdjson::dom::element value) const;           // "parent[3]"
  Field MapKey(std::string_view key, simdjson::dom::element value) const;  // "parent[app]"

  std::string Path() const;
  // InvalidArgument with `message`, carrying Path() for FieldPathOf().
  absl::Status Error(std::string_view message) const;
  // "expected <expected>, got <JSON type of this value>".
  absl::Status TypeError(std::string_view expected) const;

  absl::StatusOr<std::string_view> String() const;  // views the parsed document
  absl::StatusOr<bool> Bool() const;
  // An integer in [min, max]; "must be between 1 and 65535, got 70000" otherwise.
  absl::StatusOr<int> Int(int min, int max) const;
  absl::StatusOr<simdjson::dom::array> Array() const;
  // Calls fn(const Field& item, size_t index) -> absl::Status for each element, in order, and
  // stops at the first error.
  template <typename Fn>
  absl::Status ForEach(Fn&& fn) const;

 private:
  enum class Step : uint8_t { kRoot, kMember, kIndex, kMapKey };
  Field(simdjson::dom::element value, const Field* parent, Step step, std::string_view key,
        size_t index)
      : value_(value), parent_(parent), step_(step), key_(key), index_(index) {}

  simdjson::dom::element value_;
  const Field* parent_ = nullptr;
  Step step_ = Step::kRoot;
  std::string_view key_;
  size_t index_ = 0;
};

// The field path recorded by Field::Error, or "" for any other status.
std::string FieldPathOf(const absl::Status& status);

// Accepted spellings of an enum-valued field.
template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

// A JSON object with its Field, read by member name. Absent and null members both read as unset,
// as they do for the API server's Go clients (encoding/json leaves the zero value for null).
// Readers leave *out unchanged when the member is unset. Thread: any.
class ObjectField final {
 public:
  // "expected object, got <type>" unless `field` holds an object.
  static absl::StatusOr<ObjectField> Of(const Field& field);

  const Field& field() const { return field_; }
  std::optional<Field> Get(std::string_view key) const;
  // "<key>: required" when unset.
  absl::StatusOr<Field> Require(std::string_view key) const;
  absl::StatusOr<std::optional<ObjectField>> GetObject(std::string_view key) const;
  // An error at member `key`, whether or not it is present.
  absl::Status Error(std::string_view key, std::string_view message) const;

  absl::Status ReadString(std::string_view key, std::string* out) const;
  absl::Status ReadInt(std::string_view key, int min, int max, int* out) const;
  absl::Status ReadBool(std::string_view key, std::optional<bool>* out) const;
  // An object of strings, such as metadata.labels; errors name the key: "metadata.labels[app]".
  absl::Status ReadStringMap(std::string_view key, std::map<std::string, std::string>* out) const;
  // An empty string reads as unset: the API server defaults these fields, and kube-proxy treats
  // "" like the default (it compares against the non-default value only).
  template <typename E, size_t N>
  absl::Status ReadEnum(std::string_view key, const EnumName<E> (&names)[N], E* out) const;

 private:
  ObjectField(simdjson::dom::object object, const Field& field) : object_(object), field_(field) {}

  simdjson::dom::object object_;
  Field field_;
};

// Maps a string field onto `names`; `must be one of "TCP", "UDP"; got "HTTP"` otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseEnum(const Field& field, const EnumName<E> (&names)[N]) {
  ASSIGN_OR_RETURN(std::string_view text, field.String());
  std::string want;
  for (const EnumName<E>& n : names) {
    if (n.name == text) {
      return n.value;
    }
    absl::StrAppend(&want, want.empty() ? "" : ", ", "\"", base::Absl(n.name), "\"");
  }
  return field.Error(absl::StrCat("must be one of ", want, "; got \"", base::Absl(text), "\""));
}

template <typename Fn>
absl::Status Field::ForEach(Fn&& fn) const {
  ASSIGN_OR_RETURN(simdjson::dom::array array, Array());
  size_t index = 0;
  for (simdjson::dom::element item : array) {
    RETURN_IF_ERROR(fn(Index(index, item), index));
    ++index;
  }
  return absl::OkStatus();
}

template <typename E, size_t N>
absl::Status ObjectField::ReadEnum(std::string_view key, const EnumName<E> (&names)[N],
                                   E* out) const {
  std::optional<Field> field = Get(key);
  std::string_view text;
  if (!field || (field->value().get(text) == simdjson::SUCCESS && text.empty())) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*out, ParseEnum(*field, names));
  return absl::OkStatus();
}

}  // namespace sluice::config
