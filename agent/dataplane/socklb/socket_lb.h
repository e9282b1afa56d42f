// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"
#include "agent/dataplane/socklb/sock_lb_object.h"
#include "agent/dataplane/socklb/udp_reaper.h"

namespace sluice::socklb {

// Socket-level balancing: the cgroup socket-address programs (SockLbObject: loading, pinning,
// adoption), their service maps programmed through the BpfMap seam (ServiceMaps) and the
// reaper of stale connected UDP sockets (UdpReaper), put together. With a bpffs root, links and
// maps are pinned there and adopted by the next agent, so translation goes on while the agent
// restarts; ~SocketLb leaves them in place. Thread: control plane; Counters() and Frontends()
// are thread-safe.
class SocketLb final {
 public:
  using Options = LoadOptions;
  using Counts = ServiceMaps::Counts;

  // Loads and attaches the programs. PermissionDenied without CAP_BPF + CAP_NET_ADMIN (or
  // CAP_SYS_ADMIN); FailedPrecondition when `cgroup` is not a cgroup v2 directory.
  static absl::StatusOr<std::unique_ptr<SocketLb>> Create(const Options& options);
  // No programs and no reaper: programs `maps`, which must outlive it (unit tests of its users,
  // over FakeBpfMap).
  static std::unique_ptr<SocketLb> ForMaps(ServiceMaps::Maps maps);
  ~SocketLb();

  // Programs `changes` (removing a name that is not programmed does nothing; programming a
  // service as it is, too). Each service is switched in one map write per frontend, after its
  // new backend set is complete; the sets replaced by the previous Apply are freed here.
  // Connected UDP sockets translated to a backend that left a service are then closed.
  absl::Status Apply(const std::vector<Change>& changes);
  // `all` is every service: the others are removed, and the first time, what an earlier agent
  // left in adopted maps too.
  absl::Status ApplyAll(const std::map<std::string, Service>& all);

  // Whether the kernel can close stale connected UDP sockets (bpf_sock_destroy, >= 6.5).
  bool can_reap() const { return reaper_ != nullptr; }
  // Connected UDP sockets closed so far. Thread-safe.
  uint64_t reaped() const { return reaper_ ? reaper_->reaped() : 0; }
  // Per service port, summed over CPUs. Thread-safe.
  std::map<std::string, Counts> Counters() const { return services_->Counters(); }
  // As ServiceMaps::ForEachCounter. Thread-safe.
  void ForEachCounter(
      absl::FunctionRef<void(const std::string& name, uint32_t id, const Counts&)> fn) const {
    services_->ForEachCounter(fn);
  }
  // Frontends programmed per service port ("tcp/10.96.0.10:80"). Thread-safe.
  std::map<std::string, std::vector<std::string>> Frontends() const {
    return services_->Frontends();
  }
  // Whether maps or links of an earlier agent were adopted.
  bool adopted() const {
    return services_->adopted() || (object_ != nullptr && object_->adopted_links());
  }

  // Detaches and removes our pinned objects under `bpf_root`.
  static absl::Status Cleanup(const std::string& bpf_root) {
    return SockLbObject::RemovePinned(bpf_root);
  }

 private:
  // The kernel maps of `object`, which they refer into.
  struct KernelMaps {
    explicit KernelMaps(const sock_lb_bpf& s);
    fastpath::KernelBpfMap svc, slot, member, stats, gone;
  };

  SocketLb() = default;
  // Closes the UDP sockets of `gone` (best effort: logs).
  void Reap(const std::vector<Gone>& gone);

  std::unique_ptr<SockLbObject> object_;  // null: ForMaps
  std::unique_ptr<KernelMaps> kernel_maps_;
  std::unique_ptr<ServiceMaps> services_;
  std::unique_ptr<UdpReaper> reaper_;  // null without an iterator
};

}  // namespace sluice::socklb
