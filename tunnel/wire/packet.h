// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "client.pb.h"
#include "lib/base/metrics.h"

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
// closes (or, where a read can be paused, pauses) that connection only: a slow one must never
// stall the others on its stream.
inline constexpr size_t kDefaultConnBuffer = 16 << 20;
// Outbound bytes per connection that may wait for the gRPC stream before reading from that
// connection's source pauses.
inline constexpr size_t kSendWindow = 1 << 20;

// The stream metadata key of the per-connection window extension (docs/tunnel.md, "Flow
// control"): an agent sends it in its Connect request headers, a server that understands it
// answers with its own in the response headers. Its value is the sender's receive window per
// connection, in bytes. Both sides announced => SLUICE_CREDIT packets flow; otherwise (an
// upstream peer ignores unknown metadata) neither sends one.
inline constexpr char kWindowHeader[] = "sluice-window";
// Bounds on an announced window: a peer announcing something else is treated as one without
// the extension. Below one chunk a connection could never send a full read.
inline constexpr int64_t kMinWindow = static_cast<int64_t>(kReadChunk);
inline constexpr int64_t kMaxWindow = int64_t{1} << 30;
// The receive window a binary announces for --max-connection-buffer: a quarter of it, so a
// sender's overshoot (one message past its last credit, at most kMaxMessageBytes) still fits
// in the hard bound.
int64_t WindowFor(size_t max_connection_buffer);
// The header's value as a window, or 0 (absent, repeated by the caller's choice, malformed or
// out of bounds): no extension.
int64_t ParseWindow(std::string_view value);

// One connection's sending side. `in_flight` counts bytes sent toward the stream and not yet
// written by gRPC: reading from the connection's source pauses past kSendWindow and resumes at
// half of it, so one credit does not undo a pause at once (apiserver-network-proxy#180). With a
// peer window (SetPeerWindow), sending also needs the peer's credit, which it grants as its
// receiver hands bytes on: a paused consumer then pauses only its own connection's source.
// Thread: its owner's (or its owner's lock).
class SendWindow final {
 public:
  // The peer announced a window: it is the initial credit of this connection.
  void SetPeerWindow(int64_t window) {
    windowed_ = true;
    credit_ += window;
  }
  // Returns whether the source must pause now.
  bool Charge(size_t n) {
    in_flight_ += n;
    credit_ -= static_cast<int64_t>(n);
    return !open();
  }
  // gRPC wrote `n` of our bytes. Returns whether a paused source may resume.
  bool Credit(size_t n) {
    in_flight_ -= n;
    return may_resume();
  }
  // The peer granted `n` more bytes. Returns whether a paused source may resume.
  bool Grant(int64_t n) {
    credit_ += n;
    return may_resume();
  }
  bool open() const { return in_flight_ <= kSendWindow && (!windowed_ || credit_ > 0); }
  bool windowed() const { return windowed_; }
  size_t in_flight() const { return in_flight_; }
  int64_t credit() const { return credit_; }

 private:
  bool may_resume() const { return in_flight_ <= kSendWindow / 2 && (!windowed_ || credit_ > 0); }

  size_t in_flight_ = 0;
  bool windowed_ = false;
  int64_t credit_ = 0;  // may go below 0 by the last message sent
};

// One connection's receiving side under a window: bytes handed on (to the socket or frontend)
// and not yet granted back. Grants go out a quarter window at a time, or whatever is owed once
// the queue has drained, so a sender waiting for the last few bytes is never left short and a
// bulk transfer costs one credit packet per quarter window. Thread: its owner's.
class CreditReturn final {
 public:
  explicit CreditReturn(int64_t window) : batch_(std::max<int64_t>(window / 4, 1)) {}
  // Returns the bytes to grant now (0: none yet).
  int64_t Consumed(size_t n, bool drained) {
    owed_ += static_cast<int64_t>(n);
    if (owed_ >= batch_ || (drained && owed_ > 0)) {
      return std::exchange(owed_, 0);
    }
    return 0;
  }

 private:
  const int64_t batch_;
  int64_t owed_ = 0;
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
// sluice extension: only toward a peer that announced kWindowHeader.
Packet MakeCredit(int64_t connect_id, int64_t bytes);

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

// Upstream's stream metrics shared by both ends (konnectivity-client's common metrics), named
// `prefix` + "stream_packets_total" ({segment, packet_type}) and + "stream_errors_total"
// ({segment, code, packet_type}): one HELP text for the server's and the agent's families.
base::Family<base::Counter>& AddStreamPackets(base::Registry& r, const std::string& prefix);
base::Family<base::Counter>& AddStreamErrors(base::Registry& r, const std::string& prefix);

// Checks that the payload matches the type and IDs are sane. Receivers dispatch on `type`;
// a packet failing this is logged, counted and dropped.
absl::Status Validate(const Packet& packet);

// Approximate bytes a packet holds in memory, for queue accounting.
size_t PacketBytes(const Packet& packet);

}  // namespace sluice::tunnel::wire
