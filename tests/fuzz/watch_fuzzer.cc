// SPDX-License-Identifier: Apache-2.0
// Trust boundary: a Kubernetes API server's watch response (--source=kube). The first byte sets
// the read size, so lines cross chunk boundaries as they do on a socket; the rest is the
// stream. Each event's object goes through both decoders, as KubeSource's handlers do.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/kube/line_splitter.h"
#include "lib/kube/watch_event.h"

#include "agent/control/config/decode.h"

namespace {

// Small, so the fuzzer reaches the over-long-line refusal.
constexpr size_t kMaxLineBytes = 4096;

absl::Status OnLine(simdjson::dom::parser& parser, std::string_view line) {
  absl::StatusOr<sluice::kube::WatchEvent> event = sluice::kube::DecodeWatchEvent(parser, line);
  if (!event.ok() || event->kind != sluice::kube::WatchEvent::Kind::kObject) {
    return absl::OkStatus();
  }
  (void)sluice::config::DecodeService(event->object);
  (void)sluice::config::DecodeEndpointSlice(event->object);
  (void)sluice::config::ReadObjectId(event->object);
  return absl::OkStatus();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const size_t chunk = data[0] + 1;
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  static simdjson::dom::parser parser;  // reused, as a ListWatcher reuses its own
  sluice::kube::LineSplitter lines(kMaxLineBytes);
  while (!stream.empty()) {
    const size_t n = std::min(chunk, stream.size());
    if (!lines.Feed(stream.substr(0, n), [](std::string_view line) { return OnLine(parser, line); })
             .ok()) {
      break;
    }
    stream.remove_prefix(n);
  }
  return 0;
}
