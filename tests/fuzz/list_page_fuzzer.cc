// SPDX-License-Identifier: Apache-2.0
// Trust boundary: a Kubernetes API server's list response (--source=kube), one page:
// kube::ParseListPage, then both decoders on each item, as KubeSource's handlers do. The
// parser is reused across inputs, as a ListWatcher reuses its own.
// Input: the page's body.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/kube/list_watch.h"

#include "agent/control/config/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static simdjson::dom::parser parser;
  size_t seen = 0;
  absl::StatusOr<sluice::kube::ListPage> page = sluice::kube::ParseListPage(
      parser, std::string_view(reinterpret_cast<const char*>(data), size),
      [&seen](const simdjson::dom::element& item) {
        ++seen;
        (void)sluice::config::DecodeService(item);
        (void)sluice::config::DecodeEndpointSlice(item);
        (void)sluice::config::ReadObjectId(item);
      });
  if (page.ok() && (page->items != seen || page->resource_version.empty())) {
    __builtin_trap();  // the page must say what it handed on, and name its snapshot
  }
  return 0;
}
