// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

#include "agent/fastpath/sockmap_fast_path.h"

namespace sluice::fastpath {

// The two sockets of a proxied connection. A direction is named by its source side.
enum class Side { kClient = 0, kBackend = 1 };
inline Side Other(Side s) { return s == Side::kClient ? Side::kBackend : Side::kClient; }

// Where one direction's bytes are, all counted since enrolment.
struct Progress {
  uint64_t consumed = 0;  // redirected out of the source by the program
  uint64_t written = 0;   // reached the destination's send queue (acked + SIOCOUTQ)
  // Bytes the kernel holds between the two sockets (in the destination's psock queue),
  // beyond what TCP buffers bound.
  uint64_t in_flight() const { return consumed > written ? consumed - written : 0; }
};

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
//   - Enrol inserts the counters first, then both sockets into the peer map; Attach then puts a
//     source into the attach map, so no socket runs the verdict before its peer is registered
//     and counted. Attach a direction only while the caller holds none of its bytes (an empty
//     splice pipe): the kernel would overtake them.
//   - Attach sets SO_RCVLOWAT on the socket, which runs the verdict over bytes that arrived
//     before (they would otherwise wait until more bytes arrive).
//   - Detach/Attach also pause and resume one direction (flow control): a detached source keeps
//     its bytes in its own receive queue, where TCP's window pushes back.
//   - The destructor removes everything in the reverse order. The caller must only let it run
//     when no bytes are in flight (Progress::in_flight() == 0), or when the connection is being
//     reset: removing a socket from the maps discards its psock queue.
// Thread: owning worker loop (the bpf(2) calls themselves are thread-safe).
class SockmapLink final {
 public:
  // Neither socket is owned; both must stay open while the link exists. The marks signal the
  // worker's ring after `first_mark` bytes per direction. Fails, with nothing left in the maps,
  // if either socket is not ESTABLISHED (Unimplemented) or the maps are full
  // (ResourceExhausted).
  static absl::StatusOr<std::unique_ptr<SockmapLink>> Enrol(SockmapFastPath& fast_path,
                                                            int client_fd, int backend_fd,
                                                            uint32_t ring, uint64_t first_mark);
  ~SockmapLink();
  SockmapLink(const SockmapLink&) = delete;
  SockmapLink& operator=(const SockmapLink&) = delete;

  // Whether the kernel pumps the direction from `src` (attached and not detached by us).
  bool attached(Side src) const { return end(src).attached; }
  uint64_t cookie(Side s) const { return end(s).cookie; }

  // Stops the program on `src`. Idempotent; a socket the kernel already unlinked counts as
  // detached.
  void Detach(Side src);
  // Attaches `src` and kicks it. Fails (errno EOPNOTSUPP) once `src` left ESTABLISHED.
  absl::Status Attach(Side src);
  absl::StatusOr<Progress> Measure(Side src) const;
  // Re-arms the mark of `src` (see SockmapFastPath::SetMark).
  absl::Status SetMark(Side src, uint64_t notify_at);

 private:
  struct End {
    int fd = -1;
    uint64_t cookie = 0;
    uint64_t written_base = 0;  // acked + queued on this socket before enrolment
    bool tracked = false, peered = false, attached = false;
  };
  SockmapLink(SockmapFastPath& fast_path, uint32_t ring) : fast_path_(fast_path), ring_(ring) {}
  absl::Status Insert(uint64_t first_mark);
  End& end(Side s) { return ends_[static_cast<int>(s)]; }
  const End& end(Side s) const { return ends_[static_cast<int>(s)]; }

  SockmapFastPath& fast_path_;
  const uint32_t ring_;
  std::array<End, 2> ends_;
};

// Bytes the local side has put into `fd`'s TCP send stream: acked plus still queued.
absl::StatusOr<uint64_t> BytesWritten(int fd);

}  // namespace sluice::fastpath
