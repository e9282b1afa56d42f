// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

#include "agent/fastpath/skeleton.h"

struct sockmap_bpf;

namespace sluice::fastpath {

// The sockmap program and its maps, loaded once per agent and shared by every worker: a
// peer map (source cookie -> paired socket, no program), an attach map (own cookie -> self,
// carrying the sk_skb verdict that redirects to the peer), per-source byte counters and marks,
// and one flow-control ring per worker (bpf/sockmap.bpf.c). Every method is a bpf(2) call on a
// shared map, so this class is thread-safe; per-connection order and state live in SockmapLink.
// Thread-safe.
class SockmapFastPath final {
 public:
  struct Options {
    // Each connection takes two entries in each socket and counter map. A full map leaves
    // new connections on splice (fallback reason "map_full").
    uint32_t max_connections = 65536;
    uint32_t rings = 1;  // one flow-control ring per worker
  };

  // Loads the object and attaches the verdict program. PermissionDenied without CAP_BPF and
  // CAP_NET_ADMIN (or CAP_SYS_ADMIN); other codes when the kernel lacks a map type or helper.
  static absl::StatusOr<std::unique_ptr<SockmapFastPath>> Create(const Options& options);
  ~SockmapFastPath();

  // Creates `cookie`'s byte counter (0) and mark. Must precede Attach of that socket, or its
  // bytes go uncounted.
  absl::Status Track(uint64_t cookie, uint32_t ring, uint64_t notify_at);
  void Untrack(uint64_t cookie);
  // Bytes the program redirected from `cookie`'s socket.
  absl::StatusOr<uint64_t> Bytes(uint64_t cookie) const;
  // Arms the mark: the ring gets one event once the counter reaches notify_at, and the program
  // disarms it (0: disarmed). Call only while the socket is detached or after its event.
  absl::Status SetMark(uint64_t cookie, uint32_t ring, uint64_t notify_at);
  // Insertions fail with errno EOPNOTSUPP for a socket that is not ESTABLISHED.
  absl::Status AddPeer(uint64_t src_cookie, int peer_fd);
  void RemovePeer(uint64_t src_cookie);
  absl::Status Attach(uint64_t cookie, int fd);
  // NotFound if the socket is not attached (e.g. the kernel unlinked it when it closed).
  absl::Status Detach(uint64_t cookie);
  // Whether `cookie` is in the attach map.
  bool Attached(uint64_t cookie) const;

  // Registers a ring map fd at `index` of the ring array (FlowRing does this).
  absl::Status SetRing(uint32_t index, int ring_fd);
  void ClearRing(uint32_t index);
  const Options& options() const { return options_; }

 private:
  SockmapFastPath(const Options& options, std::unique_ptr<Skeleton<sockmap_bpf>> skel);

  const Options options_;
  std::unique_ptr<Skeleton<sockmap_bpf>> skel_;
  std::unique_ptr<ScopedProgAttach> attach_;  // after skel_: detaches before the maps close
  int peer_fd_, attach_fd_, bytes_fd_, limit_fd_, rings_fd_;
};

// SO_COOKIE of a socket: the key of every map.
absl::StatusOr<uint64_t> SocketCookie(int fd);

}  // namespace sluice::fastpath
