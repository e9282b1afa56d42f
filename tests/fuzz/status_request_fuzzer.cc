// SPDX-License-Identifier: Apache-2.0
// Trust boundary: a status server client's request head (every /healthz, /metrics port of the
// three binaries; the healthz port is reachable from any pod). Input: the bytes a client sends.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/http/request_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr size_t kMax = 512;
  const sluice::http::ParsedHead p = sluice::http::ParseRequestHead(input, kMax);
  const bool known =
      p.status == -1 || p.status == 0 || p.status == 400 || p.status == 431 || p.status == 505;
  // An accepted head lies inside the input and the limit; an incomplete one never reaches it.
  if (!known || (p.status == 0 && (p.size == 0 || p.size > input.size() || p.size > kMax)) ||
      (p.status == -1 && input.size() >= kMax)) {
    __builtin_trap();
  }
  // What a pipelined client sends next is parsed from where this head ended.
  if (p.status == 0) {
    (void)sluice::http::ParseRequestHead(input.substr(p.size), kMax);
  }
  return 0;
}
