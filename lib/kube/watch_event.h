// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "simdjson.h"

namespace sluice::kube {

enum class EventType { kAdded, kModified, kDeleted };
const char* EventTypeName(EventType type);  // "ADDED", ...

// One line of a watch response (a metav1.WatchEvent), decoded but not yet acted on.
// Views point into the parser's buffers: valid until it parses again.
struct WatchEvent {
  enum class Kind { kObject, kBookmark, kError };
  Kind kind = Kind::kObject;
  EventType type = EventType::kAdded;  // kObject
  simdjson::dom::element object;       // always a JSON object
  std::string_view resource_version;   // object's metadata.resourceVersion; "" if unset
  // kError: the metav1.Status object's code (0 if unset) and message.
  int64_t error_code = 0;
  std::string_view error_message;
};

// InvalidArgument naming the fault for a line that is not JSON, lacks "type" or an object
// "object", or has an unknown type. Thread: the parser's owner.
absl::StatusOr<WatchEvent> DecodeWatchEvent(simdjson::dom::parser& parser, std::string_view line);

}  // namespace sluice::kube
