// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace sluice::kube {

// Frames a watch response into events: the API server writes one JSON object per line, but
// chunk and read boundaries fall anywhere, so bytes are buffered until the newline. A line
// longer than the cap is refused rather than buffered without bound.
// Thread: the owning watch's.
class LineSplitter final {
 public:
  explicit LineSplitter(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Calls on_line for every complete line in buffered + `bytes` (without the '\n'; a trailing
  // '\r' and empty lines are dropped). Stops at the first non-OK status from on_line and
  // returns it. ResourceExhausted when a line exceeds the cap; the splitter is then unusable.
  absl::Status Feed(std::string_view bytes,
                    absl::FunctionRef<absl::Status(std::string_view)> on_line);

  // Bytes of an unterminated line (a stream that ended mid-event).
  size_t pending() const { return buffer_.size(); }

 private:
  const size_t max_line_bytes_;
  std::string buffer_;
};

}  // namespace sluice::kube
