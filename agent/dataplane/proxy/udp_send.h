// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <netinet/udp.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>

// Sending a batch of datagrams bound for one peer with as few trips through the stack as the
// kernel allows: one sendmmsg, and each run of equal-size datagrams as one UDP_SEGMENT (GSO)
// message, which crosses udp_sendmsg, routing, netfilter and the device once for up to 64
// datagrams and is cut back into the same datagrams at the device or the receiving socket
// (Linux 4.18, "udp: generic segmentation offload"). Profiling the relay at 64-byte datagrams
// put 71 % of its CPU in sendmmsg's per-datagram path (issue 12).
namespace sluice::proxy {

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103  // include/uapi/linux/udp.h; glibc 2.36's netinet/udp.h has it
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

// Appends one control message at `out` (which has room); returns its CMSG_SPACE.
size_t PutCmsg(char* out, int level, int type, const void* data, size_t len);

// Whether this kernel takes UDP_SEGMENT. Probed once per process: a kernel without it would
// ignore the control message and send a whole run as one datagram, so it is never sent blind.
bool UdpGsoSupported();

// Where one batch goes and what each datagram carries besides its payload.
struct UdpPeer {
  const sockaddr* name = nullptr;  // nullptr on a connected socket
  socklen_t name_len = 0;
  const char* control = nullptr;  // e.g. IP_PKTINFO; copied in front of UDP_SEGMENT
  size_t control_len = 0;
};

// Per-peer, per-direction GSO state, kept by the caller between batches (one per flow and
// direction). Starts permissive and narrows on the kernel's verdict: EMSGSIZE (6.18; EINVAL on
// older kernels) when a segment plus headers exceeds the route's MTU, EIO on older kernels
// without checksum offload on the device. Narrowing goes one byte below the refused size, so a
// flow pays one refused sendmmsg per distinct larger size; it never widens again (a route's MTU
// rarely grows while a flow lives).
struct UdpGsoState {
  size_t max_segment = 65535;  // runs of datagrams larger than this go out one by one
};

struct UdpSendResult {
  int delivered = 0;   // datagrams the kernel took
  int dropped = 0;     // datagrams lost to a full buffer or refused one by one (EMSGSIZE, EPERM)
  int hard_error = 0;  // the first error that is the socket's own (e.g. ECONNREFUSED), or 0
};

// Scratch for one batch: the messages and their control space. Thread: owning worker loop.
class UdpSender final {
 public:
  // Datagrams per batch; matches DatagramArena::kBatch. The kernel takes up to
  // UDP_MAX_SEGMENTS (64 on older kernels) per GSO message, so a run never hits that limit.
  static constexpr int kMaxDatagrams = 32;
  // Room for IP_PKTINFO / IPV6_PKTINFO plus UDP_SEGMENT.
  static constexpr size_t kControlSize = 96;

  // Sends `datagrams[0, count)` (each iovec one datagram, payload order kept) to `peer` on `fd`,
  // non-blocking. `gso` may be null: no segmentation. A full socket buffer drops the rest.
  UdpSendResult Send(int fd, const iovec* datagrams, int count, const UdpPeer& peer,
                     UdpGsoState* gso);

 private:
  // Packs datagrams[first, count) into messages_[0..) from message index 0; returns how many.
  int Pack(const iovec* datagrams, int first, int count, const UdpPeer& peer, size_t max_segment);

  std::array<mmsghdr, kMaxDatagrams> messages_{};
  std::array<int, kMaxDatagrams> segments_{};         // datagrams in each message
  std::array<size_t, kMaxDatagrams> segment_size_{};  // its UDP_SEGMENT size, 0 if none
  alignas(cmsghdr) std::array<std::array<char, kControlSize>, kMaxDatagrams> control_{};
};

}  // namespace sluice::proxy
