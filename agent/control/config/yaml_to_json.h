// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::config {

// Converts a YAML stream into one JSON text per document, in stream order, for the one
// simdjson-based decoder. An empty document becomes "null". Plain scalars that read as YAML 1.2
// core-schema null, booleans, integers (decimal, 0x, 0o) or floats become JSON literals;
// quoted, block and !!str scalars stay strings (so `port: "80"` is a string, as for the API
// server). YAML 1.1 merge keys (`<<: *anchor`) are applied, with the mapping's own keys winning.
//
// Fails with InvalidArgument naming the line and column for a syntax error, a duplicate mapping
// key (go-yaml, which kubectl uses, rejects those too), a non-scalar key, nesting deeper than
// 512 levels (which also stops recursive aliases) or output growing past 16 times the input plus
// 1 MiB (alias bombs). Never throws: yaml-cpp's exceptions are caught here.
absl::StatusOr<std::vector<std::string>> YamlToJson(std::string_view text);

}  // namespace sluice::config
