// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/cow_map.h"
#include "lib/net/address.h"

#include "agent/dataplane/fastpath/bpf_map.h"
#include "bpf/include/sluice/bpf_abi.h"

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

// A backend that left the service reached at `front` over UDP: connected sockets translated
// there are closed (UdpReaper).
struct Gone {
  net::SocketAddress front;
  net::SocketAddress backend;
  friend bool operator==(const Gone&, const Gone&) = default;
};

// `a` as the maps hold addresses: 16 bytes, IPv4 as ::ffff:a.b.c.d, port in network order.
sluice_lb_addr LbAddr(const net::SocketAddress& a);

// The programming rules of the socket-LB maps (bpf/include/sluice/bpf_abi.h), over the BpfMap
// seam: which entries a service becomes and in which order they are written so that a program
// running meanwhile never sees half a change.
// - A changed backend list is written as a new set beside the old one; then each frontend's
//   service value is replaced in one write; the old set is freed at the next Apply.
// - Membership entries (affinity checks) exist for services with affinity only.
// - IPv4 addresses are keyed as ::ffff:a.b.c.d (IPv6 sockets reaching a mapped address).
// - Maps that already hold entries (adopted from an earlier agent) continue their id and set
//   numbering; the first ApplyAll removes every entry it did not program.
// Thread: control plane; Ids(), ForEachCounter(), Counters() and Frontends() are
// thread-safe.
class ServiceMaps final {
 public:
  struct Maps {
    fastpath::BpfMap& svc;     // sluice_lb_key -> sluice_lb_svc
    fastpath::BpfMap& slot;    // sluice_lb_slot -> sluice_lb_addr
    fastpath::BpfMap& member;  // sluice_lb_member -> u8
    fastpath::BpfMap& stats;   // u32 id -> sluice_lb_stats per CPU (the programs create them)
  };
  // Reads what `maps` already hold. The maps must outlive this.
  explicit ServiceMaps(Maps maps);

  // Programs `changes` (removing a name that is not programmed does nothing; programming a
  // service as it is, too) and appends to `gone` the UDP (frontend, backend) pairs they end.
  absl::Status Apply(const std::vector<Change>& changes, std::vector<Gone>& gone);
  // `all` is every service: the others are removed, and the first time, whatever else the maps
  // hold (an earlier agent's entries).
  absl::Status ApplyAll(std::map<std::string, Service> all, std::vector<Gone>& gone);

  // Whether the maps held entries when this was created.
  bool adopted() const { return adopted_; }

  struct Counts {
    uint64_t translated = 0;
    uint64_t refused = 0;
  };
  // The id of each service port programmed (the key of the counters maps): a copy that shares
  // its entries with the one Apply keeps, so taking it holds the lock for a pointer per 64
  // entries, never for a copy of every name. Thread-safe.
  using IdMap = base::CowMap<std::string, uint32_t>;
  IdMap Ids() const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `fn` for every service port programmed when called, in name order, with its id and
  // its counters summed over CPUs (zero where the programs made none yet). The stats map is read
  // in one pass and no lock is held meanwhile: a scrape never holds up Apply. A failed read
  // leaves the counters zero (best effort). Thread-safe.
  void ForEachCounter(
      absl::FunctionRef<void(const std::string& name, uint32_t id, const Counts&)> fn) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // ForEachCounter's, by service port (for tests and callers that want a map). Thread-safe.
  std::map<std::string, Counts> Counters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Frontends programmed per service port ("tcp/10.96.0.10:80"). Thread-safe.
  std::map<std::string, std::vector<std::string>> Frontends() const ABSL_LOCKS_EXCLUDED(mu_);

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

  // One service port's change within an Apply: what is programmed and what it becomes.
  struct Step {
    std::string name;
    std::optional<Programmed> old;   // nullopt: not programmed yet
    std::optional<Programmed> next;  // nullopt: removed
    bool new_set = false;            // `next` has a backend set of its own
    absl::Status status;             // not ok: nothing of `next` is programmed, `old` stays
  };

  // Continues id and set numbering above what the maps hold.
  void Scan();
  // Removes what the maps hold and this did not program.
  void Sweep();
  // Applies changes of distinct names, each map's entries in batches, in the order that keeps
  // every frontend on a complete set: new sets, then membership, then one write per frontend
  // value, then what the old values used (and removed services' counters).
  absl::Status ApplyDistinct(const Change* changes, size_t count, std::vector<Gone>& gone)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<Step> Plan(const Change* changes, size_t count) ABSL_LOCKS_EXCLUDED(mu_);
  void WriteSets(std::vector<Step>& steps);
  void WriteMembers(std::vector<Step>& steps);
  // Returns the frontend keys written (or tried), for Retire to leave alone.
  absl::Status WriteFrontends(const std::vector<Step>& steps, std::set<std::string>& written);
  void Retire(const std::vector<Step>& steps, const std::set<std::string>& written,
              std::vector<Gone>& gone);
  void FreeSet(uint32_t set, uint32_t count);

  const Maps maps_;
  bool adopted_ = false;
  bool swept_ = false;
  uint32_t next_id_ = 1;
  uint32_t next_set_ = 1;
  std::vector<Retired> retired_;
  mutable absl::Mutex mu_;
  std::map<std::string, Programmed> programmed_ ABSL_GUARDED_BY(mu_);
  IdMap ids_ ABSL_GUARDED_BY(mu_);  // programmed_'s ids, for Ids()
};

}  // namespace sluice::socklb
