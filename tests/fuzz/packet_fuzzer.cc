// SPDX-License-Identifier: Apache-2.0
// Trust boundary: Konnectivity packets from a peer (agent streams at the server, the server's
// stream at the agent, Proxy clients). Input: one serialized Packet, as gRPC hands it over;
// Debian 12 has no libprotobuf-mutator, so the corpus holds valid serialized packets.
#include <cstddef>
#include <cstdint>

#include "google/protobuf/stubs/logging.h"

#include "tunnel/wire/packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Invalid UTF-8 in a string field is logged per parse; the log is noise that slows fuzzing.
  [[maybe_unused]] static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  sluice::tunnel::wire::Packet packet;
  if (!packet.ParseFromArray(data, static_cast<int>(size))) {
    return 0;
  }
  (void)sluice::tunnel::wire::Validate(packet);
  (void)sluice::tunnel::wire::TypeName(packet.type());
  (void)sluice::tunnel::wire::TypeLabel(packet.type());
  (void)sluice::tunnel::wire::PacketBytes(packet);
  return 0;
}
