// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_send.h"

#include <netinet/in.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "lib/base/log.h"
#include "lib/base/unique_fd.h"

namespace sluice::proxy {

namespace {

// A GSO message is one UDP datagram until it is cut: its payload obeys the IPv4 limit of
// 65535 - 20 (IP) - 8 (UDP) bytes (__ip_append_data, EMSGSIZE); IPv6 allows 20 more.
constexpr size_t kMaxGsoPayload = 65507;

}  // namespace

size_t PutCmsg(char* out, int level, int type, const void* data, size_t len) {
  auto* c = reinterpret_cast<cmsghdr*>(out);
  c->cmsg_level = level;
  c->cmsg_type = type;
  c->cmsg_len = CMSG_LEN(len);
  std::memcpy(CMSG_DATA(c), data, len);
  return CMSG_SPACE(len);
}

bool UdpGsoSupported() {
  static const bool supported = [] {
    base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    int value = 0;
    socklen_t len = sizeof(value);
    if (!fd || getsockopt(fd.get(), SOL_UDP, UDP_SEGMENT, &value, &len) != 0) {
      VLOG(1) << "UDP_SEGMENT unavailable (" << strerror(errno)
              << "): UDP datagrams are sent one message each";
      return false;
    }
    return true;
  }();
  return supported;
}

int UdpSender::Pack(const iovec* datagrams, int first, int count, const UdpPeer& peer,
                    size_t max_segment) {
  int m = 0;
  for (int i = first; i < count; ++m) {
    const size_t size = datagrams[i].iov_len;
    int j = i + 1;
    if (size > 0 && size <= max_segment) {
      // A run: equal sizes, then at most one shorter (non-empty) datagram to end it, because
      // the kernel cuts a GSO message into gso_size pieces and a shorter tail.
      size_t total = size;
      while (j < count && datagrams[j].iov_len > 0 && datagrams[j].iov_len <= size &&
             total + datagrams[j].iov_len <= kMaxGsoPayload) {
        total += datagrams[j].iov_len;
        if (datagrams[j++].iov_len < size) {
          break;
        }
      }
    }
    msghdr& h = messages_[m].msg_hdr;
    h = msghdr{};
    h.msg_name = const_cast<sockaddr*>(peer.name);
    h.msg_namelen = peer.name_len;
    h.msg_iov = const_cast<iovec*>(&datagrams[i]);
    h.msg_iovlen = static_cast<size_t>(j - i);
    segments_[m] = j - i;
    segment_size_[m] = j - i > 1 ? size : 0;
    if (segment_size_[m] == 0) {
      h.msg_control = const_cast<char*>(peer.control);
      h.msg_controllen = peer.control_len;
    } else {
      char* out = control_[m].data();
      if (peer.control_len > 0) {  // memcpy from a null pointer is undefined even for 0 bytes
        std::memcpy(out, peer.control, peer.control_len);
      }
      const auto gso_size = static_cast<uint16_t>(size);  // the kernel reads a __u16
      h.msg_control = out;
      h.msg_controllen = peer.control_len + PutCmsg(out + peer.control_len, SOL_UDP, UDP_SEGMENT,
                                                    &gso_size, sizeof(gso_size));
    }
    i = j;
  }
  return m;
}

UdpSendResult UdpSender::Send(int fd, const iovec* datagrams, int count, const UdpPeer& peer,
                              UdpGsoState* gso) {
  UdpSendResult result;
  size_t max_segment = gso != nullptr && UdpGsoSupported() ? gso->max_segment : 0;
  int first = 0;  // datagrams before it are sent or dropped
  while (first < count) {
    const int n = Pack(datagrams, first, count, peer, max_segment);
    bool repack = false;
    for (int m = 0; m < n && !repack;) {
      const int r = sendmmsg(fd, &messages_[m], static_cast<unsigned>(n - m), MSG_DONTWAIT);
      if (r > 0) {
        for (const int end = m + r; m < end; ++m) {
          result.delivered += segments_[m];
          first += segments_[m];
        }
        continue;
      }
      if (r < 0 && errno == EINTR) {
        continue;
      }
      if (r == 0 || errno == EAGAIN || errno == ENOBUFS || errno == ENOMEM) {
        result.dropped += count - first;  // the socket buffer is full: drop the rest
        return result;
      }
      const int err = errno;
      if (segment_size_[m] != 0 && (err == EINVAL || err == EIO || err == EMSGSIZE)) {
        // This route will not take GSO at this size: a segment plus headers exceeds its MTU
        // (EMSGSIZE on 6.18, EINVAL from udp_send_skb on older kernels), or the device cannot
        // checksum (EIO, any size). Resend these one by one.
        gso->max_segment = err == EIO ? 0 : segment_size_[m] - 1;
        max_segment = gso->max_segment;
        VLOG(1) << "UDP_SEGMENT " << segment_size_[m] << " refused (" << strerror(err)
                << "): segments up to " << max_segment << " bytes from now on";
        repack = true;
        continue;
      }
      // The message at `m` was refused: skip it, send the rest. EMSGSIZE and EPERM (a
      // firewall) concern that message only; anything else is the socket's own error, which
      // accounts for one datagram.
      if (err != EMSGSIZE && err != EPERM && result.hard_error == 0) {
        result.hard_error = err;
        result.dropped += segments_[m] - 1;
      } else {
        result.dropped += segments_[m];
      }
      first += segments_[m];
      ++m;
    }
    if (!repack) {
      break;
    }
  }
  return result;
}

}  // namespace sluice::proxy
