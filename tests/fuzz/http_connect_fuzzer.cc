// SPDX-License-Identifier: Apache-2.0
// Trust boundary: an HTTP CONNECT client's request head (sluice-tunnel-server's HTTP CONNECT
// frontend). Input: the bytes a client sends; the head is framed as ConnectSession does.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tunnel/server/http_connect.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t end = input.find("\r\n\r\n");
  if (end == std::string::npos) {
    return 0;
  }
  const sluice::tunnel::server::ConnectHead head =
      sluice::tunnel::server::ParseConnectHead(input.substr(0, end + 2));
  if (head.status == 0 && head.authority.empty()) {
    __builtin_trap();  // an accepted head always names a destination
  }
  // The dial error that ConnectErrorReply formats comes from the agent, which is outside too.
  (void)sluice::tunnel::server::ConnectErrorReply(input.substr(end + 4));
  return 0;
}
