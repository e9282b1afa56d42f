// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "agent/dataplane/fastpath/skeleton.h"

struct sock_lb_bpf;

namespace sluice::socklb {

struct LoadOptions {
  std::string cgroup;            // cgroup v2 directory whose processes are translated
  std::string bpf_root;          // pin directory on a bpffs ("" = no pinning: detach at exit)
  bool host_netns_only = false;  // translate only sockets of the agent's network namespace
  // Map sizes (max_entries, fixed at load; docs/configuration.md has what each costs). The
  // hash maps allocate per entry, so these bound what programming (and so the API) can make
  // the kernel allocate; the affinity LRU is preallocated.
  uint32_t max_frontends = 65536;  // frontends of all services; also counters
  uint32_t max_slots = 262144;     // backends of all services, twice while a set is swapped
  uint32_t max_sticky = 16384;     // (client netns, service) affinity entries
};

// The socket-LB BPF object (bpf/sock_lb.bpf.c) loaded, its hooks attached through links to a
// cgroup v2 directory. With a bpf root, maps and links are pinned there: an earlier agent's
// are adopted (maps reused, links switched to the new programs), whatever an earlier version
// pinned and this one does not use is removed. The links stay pinned and attached when this
// is destroyed. Thread: control plane.
class SockLbObject final {
 public:
  // PermissionDenied without CAP_BPF + CAP_NET_ADMIN (or CAP_SYS_ADMIN); FailedPrecondition when
  // `cgroup` is not a cgroup v2 directory or the bpf root cannot be made a bpffs.
  static absl::StatusOr<std::unique_ptr<SockLbObject>> Load(const LoadOptions& options);
  ~SockLbObject();

  sock_lb_bpf& skel() const { return **skel_; }
  // Whether links of an earlier agent were adopted.
  bool adopted_links() const { return adopted_links_; }
  // The UDP reaper's socket iterator; null where the kernel has no bpf_sock_destroy (< 6.5) or
  // this process no CAP_PERFMON.
  fastpath::LinkPtr TakeReapIterator() { return std::move(reap_link_); }

  // Detaches and removes every object of ours pinned under `bpf_root`: links are detached
  // first (another holder of a link, or a pin elsewhere, would otherwise keep the hook), then
  // links and maps are unpinned. Nothing there is not an error.
  static absl::Status RemovePinned(const std::string& bpf_root);

 private:
  SockLbObject(const LoadOptions& options, std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel);
  absl::Status Attach(uint64_t cgroup_id, int cgroup_fd);
  // Copies the pairs of connected sockets from the pinned reverse LRU of the version before
  // socket storage into their storage (sluice_tcp_adopt, sluice_udp_adopt).
  void AdoptEarlierPairs();

  const LoadOptions options_;
  std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel_;
  std::vector<fastpath::LinkPtr> links_;  // pinned ones stay attached when closed
  fastpath::LinkPtr reap_link_;
  bool adopted_links_ = false;
};

// Makes `root` a directory on a bpffs: an existing bpffs (the node's /sys/fs/bpf) where it is
// on one; otherwise a bpffs is mounted on `root`, or, where `root` cannot be created (its
// parent is sysfs's empty /sys/fs/bpf, with no bpffs mounted), on its deepest existing
// ancestor if that is an empty directory. Each mount is logged.
absl::Status EnsureBpfFs(const std::string& root);

}  // namespace sluice::socklb
