// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/decode.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "simdjson.h"

#include "agent/control/config/decode_objects.h"
#include "agent/control/config/json_field.h"
#include "agent/control/config/yaml_to_json.h"

namespace sluice::config {
namespace {

using base::Absl;

// Deeper than any manifest; bounds the recursion of the error locator below.
constexpr int kMaxLocateDepth = 1024;

// Walks the document with simdjson's On-Demand API, which, unlike DOM, can say where it stopped
// (document::current_location). Only used once DOM parsing has failed.
simdjson::error_code WalkJson(simdjson::ondemand::value value, int depth) {
  if (depth > kMaxLocateDepth) {
    return simdjson::DEPTH_ERROR;
  }
  simdjson::ondemand::json_type type;
  if (auto error = value.type().get(type)) {
    return error;
  }
  switch (type) {
    case simdjson::ondemand::json_type::object: {
      simdjson::ondemand::object object;
      if (auto error = value.get_object().get(object)) {
        return error;
      }
      for (auto member : object) {
        simdjson::ondemand::value child;
        std::string_view key;
        auto error = member.unescaped_key().get(key);
        if (error || (error = member.value().get(child)) || (error = WalkJson(child, depth + 1))) {
          return error;
        }
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::array: {
      simdjson::ondemand::array array;
      if (auto error = value.get_array().get(array)) {
        return error;
      }
      for (auto element : array) {
        simdjson::ondemand::value child;
        if (auto error = element.get(child); error || (error = WalkJson(child, depth + 1))) {
          return error;
        }
      }
      return simdjson::SUCCESS;
    }
    case simdjson::ondemand::json_type::string:
      return value.get_string().error();
    case simdjson::ondemand::json_type::number:
      return value.get_number().error();
    case simdjson::ondemand::json_type::boolean:
      return value.get_bool().error();
    case simdjson::ondemand::json_type::null:
      return value.is_null().error();
  }
  return simdjson::SUCCESS;
}

// Byte offset of the first syntax error in `text`, when simdjson can tell.
std::optional<size_t> LocateJsonError(std::string_view text) {
  simdjson::padded_string padded(text.data(), text.size());
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document document;
  if (parser.iterate(padded).get(document) != simdjson::SUCCESS) {
    return std::nullopt;  // e.g. an unclosed string: found before any position is tracked
  }
  simdjson::ondemand::value root;
  if (document.get_value().get(root) == simdjson::SUCCESS) {
    // On success the location (if any) is trailing content after the document.
    (void)WalkJson(root, 0);
  }
  const char* at = nullptr;
  if (document.current_location().get(at) != simdjson::SUCCESS || at < padded.data() ||
      at > padded.data() + text.size()) {
    return std::nullopt;
  }
  return static_cast<size_t>(at - padded.data());
}

absl::Status JsonSyntaxError(std::string_view text, simdjson::error_code error) {
  std::optional<size_t> offset = LocateJsonError(text);
  if (!offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: ", simdjson::error_message(error)));
  }
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < *offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("invalid JSON at line ", line, ", column ",
                                                 *offset - line_start + 1, ": ",
                                                 simdjson::error_message(error)));
}

std::string Join(std::string_view location, std::string_view part) {
  return location.empty() ? std::string(part) : absl::StrCat(Absl(location), ", ", Absl(part));
}

DecodeError MakeError(std::string_view kind, const simdjson::dom::element& object,
                      std::string_view location, const absl::Status& status) {
  return DecodeError{std::string(kind), ReadObjectId(object), std::string(location),
                     FieldPathOf(status), std::string(status.message())};
}

// What a typed list (ServiceList, as the API server returns) implies for items that carry no
// kind and apiVersion. Empty for a generic List and for top-level objects.
struct ItemDefaults {
  std::string_view kind;
  std::string_view api_version;
};

absl::StatusOr<std::string_view> ReadKind(const ObjectField& object, std::string_view implied) {
  std::optional<Field> field = object.Get("kind");
  if (!field) {
    return implied.empty() ? absl::StatusOr<std::string_view>(object.Error("kind", "required"))
                           : implied;
  }
  ASSIGN_OR_RETURN(std::string_view kind, field->String());
  if (kind.empty()) {
    return field->Error("required");
  }
  return kind;
}

template <typename Ptr>
void Collect(absl::StatusOr<Ptr> decoded, std::string_view kind,
             const simdjson::dom::element& object, std::string_view location,
             std::vector<Ptr>& good, std::vector<DecodeError>& errors) {
  if (decoded.ok()) {
    good.push_back(*std::move(decoded));
  } else {
    errors.push_back(MakeError(kind, object, location, decoded.status()));
  }
}

void DecodeList(const ObjectField& list, std::string_view kind, std::string_view location,
                const AddressPolicy& policy, Manifest& out);

void DecodeObject(const simdjson::dom::element& element, std::string_view location,
                  const ItemDefaults& defaults, const AddressPolicy& policy, Manifest& out) {
  Field root(element);
  absl::StatusOr<ObjectField> object = ObjectField::Of(root);
  absl::StatusOr<std::string_view> kind =
      object.ok() ? ReadKind(*object, defaults.kind) : object.status();
  if (!kind.ok()) {
    out.errors.push_back(MakeError("", element, location, kind.status()));
  } else if (*kind == "Service") {
    Collect(DecodeServiceObject(*object, defaults.api_version, policy), *kind, element, location,
            out.services, out.errors);
  } else if (*kind == "EndpointSlice") {
    Collect(DecodeEndpointSliceObject(*object, defaults.api_version, policy), *kind, element,
            location, out.endpoint_slices, out.errors);
  } else if (kind->ends_with("List")) {
    DecodeList(*object, *kind, location, policy, out);
  } else {
    ++out.ignored;
  }
}

void DecodeList(const ObjectField& list, std::string_view kind, std::string_view location,
                const AddressPolicy& policy, Manifest& out) {
  ItemDefaults defaults{kind.substr(0, kind.size() - 4), ""};
  std::optional<Field> version = list.Get("apiVersion");
  std::string_view api_version;
  if (version && !defaults.kind.empty() && version->value().get(api_version) == simdjson::SUCCESS) {
    defaults.api_version = api_version;
  }
  std::optional<Field> items = list.Get("items");
  if (!items) {
    return;
  }
  absl::StatusOr<simdjson::dom::array> array = items->Array();
  if (!array.ok()) {
    out.errors.push_back(MakeError(kind, list.field().value(), location, array.status()));
    return;
  }
  size_t index = 0;
  for (simdjson::dom::element item : *array) {
    DecodeObject(item, Join(location, absl::StrCat("items[", index, "]")), defaults, policy, out);
    ++index;
  }
}

// One JSON text or YAML document: an object, an array of objects, or null (an empty document).
void DecodeDocument(const simdjson::dom::element& root, std::string_view location,
                    const AddressPolicy& policy, Manifest& out) {
  simdjson::dom::array array;
  if (root.is_null()) {
    return;
  }
  if (root.get(array) != simdjson::SUCCESS) {
    DecodeObject(root, location, {}, policy, out);
    return;
  }
  size_t index = 0;
  for (simdjson::dom::element item : array) {
    DecodeObject(item, Join(location, absl::StrCat("[", index, "]")), {}, policy, out);
    ++index;
  }
}

absl::Status CheckKind(const ObjectField& object, std::string_view want) {
  std::optional<Field> field = object.Get("kind");
  if (!field) {
    return absl::OkStatus();  // list items from the API server carry no kind
  }
  ASSIGN_OR_RETURN(std::string_view kind, field->String());
  if (kind != want) {
    return field->Error(absl::StrCat("must be \"", Absl(want), "\", got \"", Absl(kind), "\""));
  }
  return absl::OkStatus();
}

template <typename Ptr, typename Decode>
absl::StatusOr<Ptr> DecodeOne(const simdjson::dom::element& element, std::string_view kind,
                              std::string_view api_version, const AddressPolicy& policy,
                              Decode decode) {
  absl::StatusOr<Ptr> result = [&]() -> absl::StatusOr<Ptr> {
    Field root(element);
    ASSIGN_OR_RETURN(ObjectField object, ObjectField::Of(root));
    RETURN_IF_ERROR(CheckKind(object, kind));
    return decode(object, api_version, policy);
  }();
  if (result.ok()) {
    return result;
  }
  return absl::InvalidArgumentError(MakeError(kind, element, "", result.status()).ToString());
}

absl::StatusOr<Manifest> DecodeJson(simdjson::dom::parser& parser, std::string_view text,
                                    const AddressPolicy& policy) {
  simdjson::dom::element root;
  if (auto error = parser.parse(text.data(), text.size()).get(root)) {
    return JsonSyntaxError(text, error);
  }
  Manifest manifest;
  DecodeDocument(root, "", policy, manifest);
  return manifest;
}

absl::StatusOr<Manifest> DecodeYaml(simdjson::dom::parser& parser, std::string_view text,
                                    const AddressPolicy& policy) {
  ASSIGN_OR_RETURN(std::vector<std::string> documents, YamlToJson(text));
  Manifest manifest;
  simdjson::dom::element root;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (auto error = parser.parse(documents[i]).get(root)) {
      // The converter writes valid JSON, so these are bytes yaml-cpp passed through unchecked
      // (invalid UTF-8).
      return absl::InvalidArgumentError(
          absl::StrCat("invalid YAML in document ", i + 1, ": ", simdjson::error_message(error)));
    }
    DecodeDocument(root, documents.size() > 1 ? absl::StrCat("document ", i + 1) : "", policy,
                   manifest);
  }
  return manifest;
}

std::string_view StripBom(std::string_view text) {
  return text.starts_with("\xEF\xBB\xBF") ? text.substr(3) : text;
}

bool LooksLikeJson(std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (text[first] == '{' || text[first] == '[');
}

}  // namespace

std::string DecodeError::ToString() const {
  std::string out = kind.empty() ? "object" : kind;
  if (id) {
    absl::StrAppend(&out, " ", id->ToString());
  }
  if (!location.empty()) {
    absl::StrAppend(&out, " (", location, ")");
  }
  absl::StrAppend(&out, ": ");
  if (!path.empty()) {
    absl::StrAppend(&out, path, ": ");
  }
  absl::StrAppend(&out, message);
  return out;
}

absl::StatusOr<Manifest> DecodeManifest(std::string_view text, Format format,
                                        const AddressPolicy& policy) {
  text = StripBom(text);
  simdjson::dom::parser parser;  // one per call: its buffers are reused across documents
  if (format == Format::kYaml || (format == Format::kAuto && !LooksLikeJson(text))) {
    return DecodeYaml(parser, text, policy);
  }
  absl::StatusOr<Manifest> json = DecodeJson(parser, text, policy);
  if (json.ok() || format == Format::kJson) {
    return json;
  }
  // Flow-style YAML (`{kind: Service, ...}`) starts with '{' too: give it a chance, but report
  // the JSON error if it is not YAML either.
  absl::StatusOr<Manifest> yaml = DecodeYaml(parser, text, policy);
  return yaml.ok() ? yaml : json;
}

absl::StatusOr<ServicePtr> DecodeService(const simdjson::dom::element& object,
                                         const AddressPolicy& policy) {
  return DecodeOne<ServicePtr>(object, "Service", "v1", policy, DecodeServiceObject);
}

absl::StatusOr<EndpointSlicePtr> DecodeEndpointSlice(const simdjson::dom::element& object,
                                                     const AddressPolicy& policy) {
  return DecodeOne<EndpointSlicePtr>(object, "EndpointSlice", "discovery.k8s.io/v1", policy,
                                     DecodeEndpointSliceObject);
}

}  // namespace sluice::config
