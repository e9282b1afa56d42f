// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/watch_event.h"

#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::kube {

const char* EventTypeName(EventType type) {
  switch (type) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "";
}

absl::StatusOr<WatchEvent> DecodeWatchEvent(simdjson::dom::parser& parser, std::string_view line) {
  simdjson::dom::element event;
  if (auto error = parser.parse(line.data(), line.size()).get(event)) {
    return absl::InvalidArgumentError(absl::StrCat("not JSON: ", simdjson::error_message(error)));
  }
  WatchEvent out;
  std::string_view type;
  if (event["type"].get(type) != simdjson::SUCCESS ||
      event["object"].get(out.object) != simdjson::SUCCESS || !out.object.is_object()) {
    return absl::InvalidArgumentError("type and object: required");
  }
  if (type == "ERROR") {
    // A metav1.Status; code 410 (reason Expired or Gone) means our resourceVersion is too old.
    out.kind = WatchEvent::Kind::kError;
    if (out.object["code"].get(out.error_code) != simdjson::SUCCESS) {
      out.error_code = 0;
    }
    if (out.object["message"].get(out.error_message) != simdjson::SUCCESS) {
      out.error_message = "(no message)";
    }
    return out;
  }
  if (out.object["metadata"]["resourceVersion"].get(out.resource_version) != simdjson::SUCCESS) {
    out.resource_version = "";
  }
  if (type == "BOOKMARK") {
    out.kind = WatchEvent::Kind::kBookmark;
  } else if (type == "ADDED") {
    out.type = EventType::kAdded;
  } else if (type == "MODIFIED") {
    out.type = EventType::kModified;
  } else if (type == "DELETED") {
    out.type = EventType::kDeleted;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown type \"", base::Absl(type), "\""));
  }
  return out;
}

}  // namespace sluice::kube
