// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "client.pb.h"

// Builders and checks for Konnectivity packets. The generated types live in the global
// namespace because the upstream protos declare no package (the RPC paths depend on it).
namespace sluice::tunnel::wire {

using Packet = ::Packet;

// Most bytes read from a socket into one DATA packet. Upstream reads 32 KiB; 256 KiB moved
// ~1.4x the bytes per CPU second through a tunnel (fewer gRPC messages, fewer wake-ups; see
// docs/performance.md) and stays far below every peer's 4 MiB receive limit. Larger chunks
// gained little more and would hold a stream longer for the connections sharing it.
inline constexpr size_t kReadChunk = 256 * 1024;
// gRPC receive limit per message: a DATA chunk plus framing, with margin for peers that send
// bigger chunks. Larger messages fail that stream with RESOURCE_EXHAUSTED, nothing else.
inline constexpr int kMaxMessageBytes = 4 << 20;
// Default bound on bytes queued for one tunnelled connection in either direction. Overflow
// closes (or, where a read can be paused, pauses) that connection only (STYLE A14).
inline constexpr size_t kDefaultConnBuffer = 16 << 20;
// Outbound bytes per connection that may wait for the gRPC stream before reading from that
// connection's source pauses.
inline constexpr size_t kSendWindow = 1 << 20;

// One connection's bytes sent toward the stream and not yet written by gRPC. Reading from the
// connection's source pauses past kSendWindow and resumes at half of it, so one credit does not
// undo a pause at once (apiserver-network-proxy#180). Thread: its owner's (or its owner's lock).
class SendWindow final {
 public:
  // Returns whether the source must pause now.
  bool Charge(size_t n) {
    in_flight_ += n;
    return !open();
  }
  // Returns whether a paused source may resume.
  bool Credit(size_t n) {
    in_flight_ -= n;
    return in_flight_ <= kSendWindow / 2;
  }
  bool open() const { return in_flight_ <= kSendWindow; }
  size_t in_flight() const { return in_flight_; }

 private:
  size_t in_flight_ = 0;
};

// glibc malloc settings for the tunnel binaries. Every DATA chunk is allocated on a gRPC thread
// and freed on the tunnel loop (or the reverse); with the default dynamic mmap/trim thresholds the
// heap top is trimmed and re-faulted constantly (perf: >30% in page faults, 5x the CPU per
// byte). Called first thing in main.
void TuneMalloc();

Packet MakeDialRequest(std::string_view address, int64_t random);
Packet MakeDialResponse(int64_t random, int64_t connect_id, std::string_view error);
Packet MakeData(int64_t connect_id, std::string bytes);
Packet MakeCloseRequest(int64_t connect_id);
Packet MakeCloseResponse(int64_t connect_id, std::string_view error);
Packet MakeCloseDial(int64_t random);
Packet MakeDrain();

// "DIAL_REQ", ..., or "UNKNOWN(<n>)".
std::string TypeName(int type);
// The packet_type label of upstream's stream_packets_total: the enum name, or for a type the
// proto does not know its number (Go's enum String()).
std::string TypeLabel(int type);

// A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx": upstream's default server
// and agent IDs (github.com/google/uuid), which operators' tooling may parse.
std::string RandomUuid();

// A gRPC status code as Go's codes.Code prints it ("Canceled", "Unavailable"; "Code(17)"), the
// code label of upstream's stream_errors_total.
std::string GrpcCodeName(int code);

// Checks that the payload matches the type and IDs are sane. Receivers dispatch on `type`;
// a packet failing this is logged, counted and dropped.
absl::Status Validate(const Packet& packet);

// Approximate bytes a packet holds in memory, for queue accounting.
size_t PacketBytes(const Packet& packet);

}  // namespace sluice::tunnel::wire
