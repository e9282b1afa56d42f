// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/fastpath/sockmap_link.h"

#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace sluice::fastpath {
namespace {

// Receive buffer of an enrolled socket. Left to autotuning, it grows to tcp_rmem[2] (32 MiB on
// 6.18) because the verdict empties it as fast as bytes arrive; a paused source then queues
// that much, and attaching it again moves all of it into the peer's psock queue at once while
// the client refills the window. A fixed 4 MiB (8 MiB of kernel accounting) still covers the
// bandwidth-delay product of 10 Gbit/s at 3 ms. SO_RCVBUFFORCE: rmem_max may be lower, and we
// hold CAP_NET_ADMIN anyway.
constexpr int kReceiveBuffer = 4 << 20;

absl::Status FixReceiveBuffer(int fd) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kReceiveBuffer, sizeof(kReceiveBuffer)) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kReceiveBuffer, sizeof(kReceiveBuffer)) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("setsockopt(fd ", fd, ", SO_RCVBUF)"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* FallbackName(Fallback f) {
  switch (f) {
    case Fallback::kNotEstablished:
      return "not_established";
    case Fallback::kMapFull:
      return "map_full";
    case Fallback::kError:
      return "error";
  }
  return "error";
}

Fallback FallbackFor(const absl::Status& enrol_error) {
  // Map insertions report EOPNOTSUPP as Unimplemented and a full map as ResourceExhausted.
  if (absl::IsUnimplemented(enrol_error)) {
    return Fallback::kNotEstablished;
  }
  if (absl::IsResourceExhausted(enrol_error)) {
    return Fallback::kMapFull;
  }
  return Fallback::kError;
}

absl::StatusOr<uint64_t> BytesWritten(int fd, uint64_t* queued_out) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("getsockopt(fd ", fd, ", TCP_INFO)"));
  }
  int queued = 0;  // written but not acked, sent or not (FIN included once shut down)
  if (ioctl(fd, SIOCOUTQ, &queued) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("ioctl(fd ", fd, ", SIOCOUTQ)"));
  }
  if (queued_out != nullptr) {
    *queued_out = static_cast<uint64_t>(queued);
  }
  return info.tcpi_bytes_acked + static_cast<uint64_t>(queued);
}

absl::StatusOr<std::unique_ptr<SockmapLink>> SockmapLink::Enrol(SockmapFastPath& fast_path,
                                                                int client_fd, int backend_fd,
                                                                uint32_t ring,
                                                                uint64_t first_mark) {
  std::unique_ptr<SockmapLink> link(new SockmapLink(fast_path, ring));
  link->end(Side::kClient).fd = client_fd;
  link->end(Side::kBackend).fd = backend_fd;
  if (absl::Status st = link->Insert(first_mark); !st.ok()) {
    return st;  // the destructor removes whatever was inserted
  }
  return link;
}

absl::Status SockmapLink::Insert(uint64_t first_mark) {
  for (End& e : ends_) {
    ASSIGN_OR_RETURN(e.cookie, SocketCookie(e.fd));
    ASSIGN_OR_RETURN(e.written_base, BytesWritten(e.fd));
    RETURN_IF_ERROR(FixReceiveBuffer(e.fd));
  }
  for (End& e : ends_) {
    e.instructions = {.notify_at = first_mark, .resume_at = 0, .ring = ring_, .pass = false};
    RETURN_IF_ERROR(fast_path_.Track(e.cookie, e.instructions));
    e.tracked = true;
  }
  // Peers before attachments: a source must find its peer from its first verdict on.
  for (Side s : {Side::kClient, Side::kBackend}) {
    RETURN_IF_ERROR(fast_path_.AddPeer(cookie(s), end(Other(s)).fd));
    end(s).peered = true;
  }
  return absl::OkStatus();
}

SockmapLink::~SockmapLink() {
  for (Side s : {Side::kClient, Side::kBackend}) {
    const bool was_attached = attached(s);
    Detach(s);
    // A verdict still running on another CPU counts into this socket's entries, and a deleted
    // entry of a preallocated hash map is at once reused by the next insertion (another
    // connection's): wait for it under the socket lock first.
    if (was_attached) {
      (void)Kick(s);
    }
  }
  for (End& e : ends_) {
    if (e.peered) {
      fast_path_.RemovePeer(e.cookie);
    }
  }
  for (End& e : ends_) {
    if (e.tracked) {
      fast_path_.Untrack(e.cookie);
    }
  }
}

void SockmapLink::Detach(Side src) {
  End& e = end(src);
  if (e.attached) {
    (void)fast_path_.Detach(e.cookie);  // NotFound: the kernel unlinked it at close
    e.attached = false;
  }
}

absl::Status SockmapLink::Attach(Side src) {
  End& e = end(src);
  if (e.attached) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(fast_path_.Attach(e.cookie, e.fd));
  e.attached = true;
  return Kick(src);
}

absl::StatusOr<Progress> SockmapLink::Measure(Side src, uint64_t user_written) const {
  ASSIGN_OR_RETURN(SockmapFastPath::Counts counts, fast_path_.Count(cookie(src)));
  const End& dst = end(Other(src));
  uint64_t queued = 0;
  ASSIGN_OR_RETURN(uint64_t written, BytesWritten(dst.fd, &queued));
  Progress p{.consumed = counts.redirected,
             .passed = counts.passed,
             .repeated = counts.repeated,
             .dst_queued = queued};
  const uint64_t base = dst.written_base + user_written;
  p.written = written > base ? written - base : 0;
  return p;
}

absl::Status SockmapLink::SetMark(Side src, uint64_t notify_at) {
  End& e = end(src);
  e.instructions.notify_at = notify_at;
  return fast_path_.Instruct(e.cookie, e.instructions);
}

absl::Status SockmapLink::Pass(Side src) {
  End& e = end(src);
  e.instructions.pass = true;
  e.instructions.notify_at = 0;
  RETURN_IF_ERROR(fast_path_.Instruct(e.cookie, e.instructions));
  // A verdict that read the old instructions on another CPU may not have counted its redirect
  // yet; a Measure before it does would find nothing in flight and let the caller write ahead
  // of that skb.
  return Kick(src);
}

absl::Status SockmapLink::Resume(Side src, uint64_t forwarded, uint64_t notify_at) {
  End& e = end(src);
  e.instructions = {.notify_at = notify_at, .resume_at = forwarded, .ring = ring_, .pass = false};
  RETURN_IF_ERROR(fast_path_.Instruct(e.cookie, e.instructions));
  return Kick(src);
}

absl::Status SockmapLink::Kick(Side src) {
  // Setting SO_RCVLOWAT runs the socket's data_ready, the verdict once attached, over bytes
  // already queued; without it they wait until more bytes arrive (tcp_set_rcvlowat).
  const int one = 1;
  const int fd = end(src).fd;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("setsockopt(fd ", fd, ", SO_RCVLOWAT)"));
  }
  return absl::OkStatus();
}

}  // namespace sluice::fastpath
