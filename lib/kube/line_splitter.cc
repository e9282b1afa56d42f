// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/line_splitter.h"

#include "absl/strings/str_cat.h"

namespace sluice::kube {

namespace {

absl::Status Emit(std::string_view line,
                  absl::FunctionRef<absl::Status(std::string_view)> on_line) {
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  return line.empty() ? absl::OkStatus() : on_line(line);
}

}  // namespace

absl::Status LineSplitter::Feed(std::string_view bytes,
                                absl::FunctionRef<absl::Status(std::string_view)> on_line) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    const size_t take = nl == std::string_view::npos ? bytes.size() : nl;
    if (buffer_.size() + take > max_line_bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("watch event larger than ", max_line_bytes_, " bytes"));
    }
    if (nl == std::string_view::npos) {
      buffer_.append(bytes);
      return absl::OkStatus();
    }
    absl::Status st;
    if (buffer_.empty()) {
      st = Emit(bytes.substr(0, nl), on_line);  // the common case: no copy
    } else {
      buffer_.append(bytes.substr(0, nl));
      st = Emit(buffer_, on_line);
      buffer_.clear();
    }
    if (!st.ok()) {
      return st;
    }
    bytes.remove_prefix(nl + 1);
  }
  return absl::OkStatus();
}

}  // namespace sluice::kube
