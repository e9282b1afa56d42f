// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"

namespace sluice::testutil {

// An IPv4 TCP segment as a hand-rolled peer writes and reads it. Addresses and ports are in host
// order.
struct TcpSegment {
  uint32_t src = 0, dst = 0;
  uint16_t src_port = 0, dst_port = 0;
  uint32_t seq = 0, ack = 0;
  uint8_t flags = 0;  // TH_SYN, TH_ACK, ... (<netinet/tcp.h>)
  uint16_t window = 65535;
  std::string options;  // padded by the caller to a multiple of 4 bytes
  std::string payload;
};

// RFC 1071: the complemented one's-complement sum of `data` as 16-bit big-endian words.
uint16_t InternetChecksum(std::string_view data);
// The IPv4 packet carrying `segment`, with both checksums filled in.
std::string BuildTcpPacket(const TcpSegment& segment);
// The TCP segment in an IPv4 packet; nullopt for anything else (IPv6, UDP, truncated).
std::optional<TcpSegment> ParseTcpPacket(std::string_view packet);

// A TCP peer written by hand behind a TUN device, so that a test chooses every segment's
// sequence numbers and bytes, which no kernel socket lets it do: e.g. a retransmission that
// repeats the head of what the receiver already has. The device lives in the calling thread's
// network namespace with kLocalAddress/24 and goes with the object; the kernel routes
// kPeerAddress to it, and what the peer writes arrives as from a wire (checksums checked). One
// per namespace: the device name is fixed. Thread: the test's.
class TunTcpPeer final {
 public:
  static constexpr char kLocalAddress[] = "10.77.0.1";  // the kernel's end: listen here
  static constexpr char kPeerAddress[] = "10.77.0.2";

  // One connection the peer opened. Stream byte i has sequence number isn + 1 + i.
  struct Flow {
    uint16_t port = 0;         // the peer's
    uint16_t remote_port = 0;  // the kernel socket's
    uint32_t isn = 0;
    uint32_t remote_isn = 0;
  };

  // PermissionDenied without CAP_NET_ADMIN.
  static absl::StatusOr<std::unique_ptr<TunTcpPeer>> Create();

  // Three-way handshake from `port`, starting at `isn`, to a socket listening on
  // kLocalAddress:`remote_port`. The SYN offers an MSS and SACK (so the kernel answers repeated
  // bytes with a D-SACK and counts them in TcpExt TCPDSACKOldSent), nothing else.
  // DeadlineExceeded if no SYN-ACK comes within `timeout`.
  absl::StatusOr<Flow> Connect(uint16_t port, uint16_t remote_port, uint32_t isn,
                               absl::Duration timeout = absl::Seconds(10));
  // Writes stream bytes [offset, offset + bytes.size()) as one segment that acks the kernel's
  // SYN and nothing after it.
  absl::Status Send(const Flow& flow, uint32_t offset, std::string_view bytes);
  // Waits until the kernel acks stream bytes before `offset`, i.e. it has queued them; sending
  // the next segment only then fixes the order in which the kernel sees them.
  // DeadlineExceeded after `timeout`.
  absl::Status WaitForAck(const Flow& flow, uint32_t offset,
                          absl::Duration timeout = absl::Seconds(10));

 private:
  explicit TunTcpPeer(base::UniqueFd tun) : tun_(std::move(tun)) {}
  absl::Status Write(const TcpSegment& segment);
  // Reads what the kernel routes to the peer until a segment from `remote_port` to `port`
  // satisfies `match`, skipping everything else.
  absl::StatusOr<TcpSegment> Await(uint16_t port, uint16_t remote_port,
                                   absl::FunctionRef<bool(const TcpSegment&)> match,
                                   absl::Duration timeout);

  base::UniqueFd tun_;
};

}  // namespace sluice::testutil
