// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

#include "agent/dataplane/fastpath/kernel_link.h"
#include "agent/dataplane/fastpath/sockmap_fast_path.h"

namespace sluice::fastpath {

// Why a connection stays on (or returns to) splice, for sluice_sockmap_fallbacks_total.
enum class Fallback {
  kNotEstablished,  // a socket left ESTABLISHED before insertion (e.g. the client sent FIN)
  kMapFull,         // the socket maps are full
  kError,           // any other insertion error
};
const char* FallbackName(Fallback f);
// Classifies an Enrol error.
Fallback FallbackFor(const absl::Status& enrol_error);

// One connection's entries in the shared maps, and the per-connection rules that keep bytes
// safe around them:
//   - Enrol inserts the counters and instructions first, then both sockets into the peer map;
//     Attach then puts a source into the attach map, so no socket runs the verdict before its
//     peer is registered and counted. Attach a direction only while the caller holds none of
//     its bytes (an empty splice pipe, the socket read to EAGAIN): the kernel would overtake
//     them, or send the head of a half-read skb twice (tcp_read_skb takes whole skbs).
//   - Attach sets SO_RCVLOWAT on the socket, which runs the verdict over bytes that arrived
//     before (they would otherwise wait until more bytes arrive).
//   - An attached socket stays attached until the link goes: deleting it from the attach map
//     while its receive path runs on another CPU drops the skb in hand (the verdict then finds
//     no program: sk_psock_verdict_recv). Flow control uses Pass/Resume instead.
//   - The destructor removes everything in the reverse order. The caller must only let it run
//     when no bytes are in flight (Progress::in_flight() == 0) and no more can arrive, or when
//     the connection is being reset: removing a socket from the maps discards its psock queue.
// Thread: owning worker loop (the bpf(2) calls themselves are thread-safe).
class SockmapLink final : public KernelLink {
 public:
  // Neither socket is owned; both must stay open while the link exists. The marks signal the
  // worker's ring after `first_mark` bytes per direction. Fails, with nothing left in the maps,
  // if either socket is not ESTABLISHED (Unimplemented) or the maps are full
  // (ResourceExhausted).
  static absl::StatusOr<std::unique_ptr<SockmapLink>> Enrol(SockmapFastPath& fast_path,
                                                            int client_fd, int backend_fd,
                                                            uint32_t ring, uint64_t first_mark);
  ~SockmapLink() override;
  SockmapLink(const SockmapLink&) = delete;
  SockmapLink& operator=(const SockmapLink&) = delete;

  // Whether `src` runs the verdict.
  bool attached(Side src) const { return end(src).attached; }
  uint64_t cookie(Side s) const { return end(s).cookie; }

  // KernelLink
  // Attaches `src` and kicks it. Fails (errno EOPNOTSUPP) once `src` left ESTABLISHED.
  absl::Status Attach(Side src) override;
  // `user_written`: bytes the caller itself wrote to the destination since enrolment.
  absl::StatusOr<Progress> Measure(Side src, uint64_t user_written) const override;
  // Re-arms the mark of `src` (see SockmapFastPath::Instruct).
  absl::Status SetMark(Side src, uint64_t notify_at) override;
  // The program leaves `src`'s bytes on it for the caller to recv() from now on: when Pass
  // returns, every verdict that redirected under the old instructions has finished and is
  // counted in Progress::consumed (see Kick), so in_flight() == 0 then means nothing more of
  // `src` reaches the destination behind the caller's back.
  absl::Status Pass(Side src) override;
  // Redirects again from the next skb on once `passed` equals `forwarded` (the bytes the caller
  // read from `src` and wrote to the destination since enrolment), arms the mark at
  // `notify_at`, and kicks `src`.
  absl::Status Resume(Side src, uint64_t forwarded, uint64_t notify_at) override;
  // Runs the verdict over bytes waiting in `src`'s receive queue (SO_RCVLOWAT). It takes the
  // socket lock, which every verdict run on `src` holds (softirq or backlog), so it also waits
  // for a run in progress on another CPU.
  absl::Status Kick(Side src) override;

 private:
  struct End {
    int fd = -1;
    uint64_t cookie = 0;
    uint64_t written_base = 0;                   // acked + queued on this socket before enrolment
    SockmapFastPath::Instructions instructions;  // as last written for this source
    bool tracked = false, peered = false, attached = false;
  };
  void Detach(Side src);
  SockmapLink(SockmapFastPath& fast_path, uint32_t ring) : fast_path_(fast_path), ring_(ring) {}
  absl::Status Insert(uint64_t first_mark);
  End& end(Side s) { return ends_[static_cast<int>(s)]; }
  const End& end(Side s) const { return ends_[static_cast<int>(s)]; }

  SockmapFastPath& fast_path_;
  const uint32_t ring_;
  std::array<End, 2> ends_;
};

// Bytes the local side has put into `fd`'s TCP send stream: acked plus still queued (and the
// queued part alone).
absl::StatusOr<uint64_t> BytesWritten(int fd, uint64_t* queued = nullptr);

}  // namespace sluice::fastpath
