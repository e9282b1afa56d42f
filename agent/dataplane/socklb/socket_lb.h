// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/net/address.h"

#include "agent/dataplane/fastpath/skeleton.h"

struct sock_lb_bpf;

namespace sluice::socklb {

// One address a local client reaches a service port by (ClusterIP, external/LoadBalancer IP,
// node address + NodePort), and the protocol.
struct Frontend {
  net::SocketAddress address;
  bool udp = false;
  friend bool operator==(const Frontend&, const Frontend&) = default;
  friend auto operator<=>(const Frontend&, const Frontend&) = default;
};

// What one service port looks like to the hooks. Backends are used in this order by
// round-robin; none means every connect()/sendmsg() to a frontend fails with ECONNREFUSED.
struct Service {
  std::vector<Frontend> frontends;
  std::vector<net::SocketAddress> backends;        // of the frontends' families only
  absl::Duration affinity = absl::ZeroDuration();  // ClientIP timeout; zero: none
  bool random = false;
  friend bool operator==(const Service&, const Service&) = default;
};

// A change to one service port, by name ("ns/name:port/TCP"); nullopt removes it.
using Change = std::pair<std::string, std::optional<Service>>;

// The cgroup socket-address programs (bpf/sock_lb.bpf.c) attached to a cgroup v2 directory,
// and their maps. With a bpffs root, links and maps are pinned there and adopted by the next
// agent, so translation goes on while the agent restarts; ~SocketLb leaves them in place.
// Thread: control plane; Counters() is thread-safe.
class SocketLb final {
 public:
  struct Options {
    std::string cgroup;            // cgroup v2 directory whose processes are translated
    std::string bpf_root;          // pin directory on a bpffs ("" = no pinning: detach at exit)
    bool host_netns_only = false;  // translate only sockets of the agent's network namespace
    // Map sizes. Hash maps allocate per entry, so these only bound what programming (and so
    // the API) can make the kernel allocate; the LRU map is preallocated. What recvmsg and
    // getpeername report back lives in each translated socket (docs/architecture.md).
    uint32_t max_frontends = 262144;
    uint32_t max_slots = 524288;  // backends of all services, twice while a set is swapped
    uint32_t max_sticky = 65536;  // (client netns, service) affinity entries
  };

  // Loads and attaches the programs. PermissionDenied without CAP_BPF + CAP_NET_ADMIN (or
  // CAP_SYS_ADMIN); FailedPrecondition when `cgroup` is not a cgroup v2 directory.
  static absl::StatusOr<std::unique_ptr<SocketLb>> Create(const Options& options);
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
  bool can_reap() const { return reap_link_ != nullptr; }
  // Connected UDP sockets closed so far. Thread-safe.
  uint64_t reaped() const;

  struct Counts {
    uint64_t translated = 0;
    uint64_t refused = 0;
  };
  // Per service port, summed over CPUs. Thread-safe.
  std::map<std::string, Counts> Counters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Frontends programmed per service port ("tcp/10.96.0.10:80"). Thread-safe.
  std::map<std::string, std::vector<std::string>> Frontends() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether maps and links of an earlier agent were adopted.
  bool adopted() const { return adopted_; }

  // Removes our pinned objects under `bpf_root` (links detach once unpinned and unused).
  static absl::Status Cleanup(const std::string& bpf_root);

 private:
  struct Programmed {
    uint32_t id = 0;
    uint32_t set = 0;
    Service service;
  };
  struct Retired {
    uint32_t set = 0;
    uint32_t count = 0;
  };
  // A backend that left the service reached at `front`.
  struct Gone {
    net::SocketAddress front;
    net::SocketAddress backend;
  };

  SocketLb(const Options& options, std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel);
  absl::Status Attach(uint64_t cgroup_id, int cgroup_fd);
  // Appends the UDP frontends of `had` paired with its backends that `now` (null: removed)
  // lacks.
  static void AppendGone(const Service& had, const Service* now, std::vector<Gone>& gone);
  // Both append to `gone` the UDP (frontend, backend) pairs the change ends.
  absl::Status Upsert(const std::string& name, const Service& service, std::vector<Gone>& gone)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Remove(const std::string& name, std::vector<Gone>& gone) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WriteSet(uint32_t set, const std::vector<net::SocketAddress>& backends);
  void FreeSet(uint32_t set, uint32_t count);
  absl::Status SetMembers(uint32_t id, const Service* old_svc, const Service* new_svc);
  // Copies the pairs of connected sockets from the pinned reverse LRU of the version before
  // socket storage into their storage (sluice_tcp_adopt, sluice_udp_adopt).
  void AdoptEarlierPairs();
  // Continues id and set numbering above what adopted maps hold.
  void ScanAdopted();
  // Removes what an earlier agent left in adopted maps and this one did not program.
  void Sweep();
  // Closes connected UDP sockets translated to one of `gone`, in every network namespace of
  // the node's processes.
  absl::Status Reap(const std::vector<Gone>& gone);
  absl::Status ReapBatch(std::span<const Gone> gone);  // at most sluice_lb_gone's size

  const Options options_;
  std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel_;
  std::vector<fastpath::LinkPtr> links_;  // pinned ones stay attached when closed
  fastpath::LinkPtr reap_link_;
  int svc_fd_, slot_fd_, member_fd_, stats_fd_, gone_fd_;
  const size_t cpus_;  // a per-CPU value holds one struct per possible CPU
  bool adopted_ = false;
  bool swept_ = false;
  uint32_t next_id_ = 1;
  uint32_t next_set_ = 1;
  std::vector<Retired> retired_;
  mutable absl::Mutex mu_;
  std::map<std::string, Programmed> programmed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::socklb
