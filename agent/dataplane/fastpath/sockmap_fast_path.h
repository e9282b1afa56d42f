// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

#include "agent/dataplane/fastpath/skeleton.h"

struct sockmap_bpf;

namespace sluice::fastpath {

// The sockmap program and its maps, loaded once per agent and shared by every worker: a
// peer map (source cookie -> paired socket, no program), an attach map (own cookie -> self,
// carrying the sk_skb verdict that redirects to the peer), per-source counters and
// instructions, and one flow-control ring per worker (bpf/sockmap.bpf.c). Every method is a bpf(2)
// call on a shared map, so this class is thread-safe; per-connection order and state live in
// SockmapLink. Thread-safe.
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

  // What the program did with a source's bytes (struct sluice_count).
  struct Counts {
    uint64_t redirected = 0;
    uint64_t passed = 0;
    uint64_t repeated = 0;  // handed over twice by the kernel and cut off (neither of the above)
  };
  // What the program does with them (struct sluice_limit, bpf/include/sluice/bpf_abi.h).
  struct Instructions {
    uint64_t notify_at = 0;  // signal the ring once `redirected` reaches this; 0: disarmed
    uint64_t resume_at = 0;  // redirect only while `passed` equals this
    uint32_t ring = 0;
    bool pass = false;  // leave every byte to the agent (recv), redirect none
  };

  // Creates `cookie`'s counters (0) and instructions. Must precede Attach of that socket.
  absl::Status Track(uint64_t cookie, const Instructions& instructions);
  void Untrack(uint64_t cookie);
  // DataLoss if the kernel repeated bytes the program could not cut off (reset the connection).
  absl::StatusOr<Counts> Count(uint64_t cookie) const;
  // Replaces the instructions, in place (see struct sluice_limit). A verdict already running
  // may still act on the old ones; SockmapLink::Pass waits for it. The program disarms a mark
  // itself when it signals it, so while a mark is armed and the socket attached, re-arm only in
  // reaction to its signal.
  absl::Status Instruct(uint64_t cookie, const Instructions& instructions);
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
  int peer_fd_, attach_fd_, count_fd_, limit_fd_, rings_fd_;
};

// SO_COOKIE of a socket: the key of every map.
absl::StatusOr<uint64_t> SocketCookie(int fd);

}  // namespace sluice::fastpath
