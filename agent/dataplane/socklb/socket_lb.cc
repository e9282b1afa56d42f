// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/socket_lb.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/base/capabilities.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include <bpf/btf.h>

#include "agent/dataplane/socklb/cgroup.h"
#include "agent/dataplane/socklb/socket_walk.h"
#include "bpf/include/sluice/bpf_abi.h"
#include "bpf/sock_lb.skel.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71  // linux/socket.h, kernel 5.14; glibc 2.36 lacks it
#endif

namespace sluice::socklb {

static_assert(sizeof(sluice_lb_key) == 20, "bpf_abi.h: struct sluice_lb_key");
static_assert(sizeof(sluice_lb_addr) == 20, "bpf_abi.h: struct sluice_lb_addr");
static_assert(sizeof(sluice_lb_svc) == 24, "bpf_abi.h: struct sluice_lb_svc");
static_assert(sizeof(sluice_lb_member) == 24, "bpf_abi.h: struct sluice_lb_member");
static_assert(sizeof(sluice_lb_pair) == 40, "bpf_abi.h: struct sluice_lb_pair");
static_assert(sizeof(sluice_lb_peers) == 328, "bpf_abi.h: struct sluice_lb_peers");
static_assert(sizeof(sluice_lb_stats) == 16, "bpf_abi.h: struct sluice_lb_stats");
static_assert(sizeof(sluice_lb_gone) == 40, "bpf_abi.h: struct sluice_lb_gone");
static_assert(sizeof(sluice_lb_rev) == 32, "bpf_abi.h: struct sluice_lb_rev");

namespace {

namespace fs = std::filesystem;

// (frontend, backend) pairs the UDP reaper takes in one walk of the node's sockets.
constexpr size_t kGoneBatch = 4096;

sluice_lb_addr ToAddr(const net::SocketAddress& a) {
  sluice_lb_addr out{};
  if (a.ip().is_v4()) {
    out.addr[10] = 0xff;
    out.addr[11] = 0xff;
    std::memcpy(out.addr + 12, a.ip().bytes(), 4);
  } else {
    std::memcpy(out.addr, a.ip().bytes(), 16);
  }
  out.port = htons(a.port());
  return out;
}

sluice_lb_key ToKey(const Frontend& f) {
  const sluice_lb_addr a = ToAddr(f.address);
  sluice_lb_key key{};
  std::memcpy(key.addr, a.addr, sizeof(key.addr));
  key.port = a.port;
  key.proto = f.udp ? IPPROTO_UDP : IPPROTO_TCP;
  return key;
}

// Every key of a map, read before any is deleted (deleting while walking restarts the walk).
template <typename K>
std::vector<K> Keys(int map_fd) {
  std::vector<K> keys;
  K key{};
  const K* prev = nullptr;
  while (bpf_map_get_next_key(map_fd, prev, &key) == 0) {
    keys.push_back(key);
    prev = &keys.back();
  }
  return keys;
}

// Makes `root` a directory on a bpffs: an existing bpffs (the node's /sys/fs/bpf), or a new
// instance mounted on it (a private one, e.g. in tests).
absl::Status EnsureBpfFs(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("mkdir ", root, ": ", ec.message()));
  }
  struct statfs st;
  if (statfs(root.c_str(), &st) == 0 && st.f_type == BPF_FS_MAGIC) {
    return absl::OkStatus();
  }
  if (mount("bpf", root.c_str(), "bpf", 0, "mode=0700") != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("mount bpffs on ", root));
  }
  return absl::OkStatus();
}

bool KernelHasKfunc(const char* name) {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) {
    return false;
  }
  const bool found = btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) >= 0;
  btf__free(vmlinux);
  return found;
}

absl::StatusOr<uint64_t> OwnNetnsCookie() {
  base::UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  uint64_t cookie = 0;
  socklen_t len = sizeof(cookie);
  if (!s || getsockopt(s.get(), SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) != 0) {
    return base::ErrnoStatus(errno, "getsockopt(SO_NETNS_COOKIE)");
  }
  return cookie;
}

// Our pinned maps, by name. A pin of another name under the root is stale: an earlier
// version's (sluice_lb_rev, the node-wide reverse LRU that socket storage replaced).
constexpr const char* kMaps[] = {"sluice_lb_svc",   "sluice_lb_slot",  "sluice_lb_member",
                                 "sluice_lb_stick", "sluice_lb_stats", "sluice_lb_gone",
                                 "sluice_lb_conn",  "sluice_lb_dgram"};

// The cgroup hooks, reverse ones first: a socket translated by a new connect hook must find
// them.
std::vector<bpf_program*> Hooks(sock_lb_bpf& s) {
  return {s.progs.sluice_recvmsg4, s.progs.sluice_recvmsg6, s.progs.sluice_peer4,
          s.progs.sluice_peer6,    s.progs.sluice_connect4, s.progs.sluice_connect6,
          s.progs.sluice_sendmsg4, s.progs.sluice_sendmsg6};
}

std::string LinkPin(const std::string& root, const bpf_program* prog) {
  return absl::StrCat(root, "/link_", bpf_program__name(prog));
}

// Unpins what an earlier version pinned and this one does not use: maps it alone had, and
// links of its programs this one lacks (sluice_release, which deleted sluice_lb_rev entries),
// which detach once unpinned. Called after Attach, so every hook of ours is in place.
void RemoveStalePins(const std::string& root, sock_lb_bpf& s) {
  std::set<std::string> links;
  for (const bpf_program* prog : Hooks(s)) {
    links.insert(absl::StrCat("link_", bpf_program__name(prog)));
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename();
    const bool stale = name.rfind("sluice_lb_", 0) == 0
                           ? std::find(std::begin(kMaps), std::end(kMaps), name) == std::end(kMaps)
                           : name.rfind("link_sluice_", 0) == 0 && !links.contains(name);
    if (stale && unlink(entry.path().c_str()) == 0) {
      LOG(INFO) << "socket LB: removed " << entry.path().string() << " an earlier version pinned";
    }
  }
}

// The reverse LRU the version before socket storage pinned under `root`, if it is there and
// has that version's layout: its connected sockets' pairs are copied into their storage.
base::UniqueFd EarlierReverseMap(const std::string& root) {
  base::UniqueFd fd(bpf_obj_get(absl::StrCat(root, "/sluice_lb_rev").c_str()));
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  if (!fd || bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0 ||
      info.type != BPF_MAP_TYPE_LRU_HASH || info.key_size != sizeof(sluice_lb_rev) ||
      info.value_size != sizeof(sluice_lb_addr)) {
    return base::UniqueFd();
  }
  return fd;
}

std::string FrontendName(const Frontend& f) {
  return absl::StrCat(f.udp ? "udp/" : "tcp/", f.address.ToString());
}

}  // namespace

absl::StatusOr<std::unique_ptr<SocketLb>> SocketLb::Create(const Options& options) {
  ASSIGN_OR_RETURN(const uint64_t cgroup_id, Cgroup2Id(options.cgroup));
  base::UniqueFd cgroup(open(options.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cgroup) {
    return base::ErrnoStatus(errno, absl::StrCat("open ", options.cgroup));
  }
  const bool pin = !options.bpf_root.empty();
  if (pin) {
    RETURN_IF_ERROR(EnsureBpfFs(options.bpf_root));
  }
  uint64_t host_netns = 0;
  if (options.host_netns_only) {
    ASSIGN_OR_RETURN(host_netns, OwnNetnsCookie());
  }
  // The socket iterator is a tracing program (CAP_PERFMON); without it, or without the kfunc,
  // everything else still loads.
  const bool tracing = base::RequireCapabilities({{CAP_PERFMON, "CAP_PERFMON"}}).ok();
  const bool reap = tracing && KernelHasKfunc("bpf_sock_destroy");
  // An upgrade from the version before socket storage: its pinned reverse LRU is read once.
  const base::UniqueFd earlier =
      pin && tracing ? EarlierReverseMap(options.bpf_root) : base::UniqueFd();
  auto configure = [&](sock_lb_bpf& s) -> absl::Status {
    // Size 0: socket storage, which has no max_entries (it comes and goes with the sockets).
    const std::pair<bpf_map*, uint32_t> maps[] = {{s.maps.sluice_lb_svc, options.max_frontends},
                                                  {s.maps.sluice_lb_slot, options.max_slots},
                                                  {s.maps.sluice_lb_member, options.max_slots},
                                                  {s.maps.sluice_lb_stick, options.max_sticky},
                                                  {s.maps.sluice_lb_stats, options.max_frontends},
                                                  {s.maps.sluice_lb_gone, kGoneBatch},
                                                  {s.maps.sluice_lb_conn, 0},
                                                  {s.maps.sluice_lb_dgram, 0}};
    static_assert(std::size(maps) == std::size(kMaps));
    for (auto [map, size] : maps) {
      if (int err = size == 0 ? 0 : bpf_map__set_max_entries(map, size); err != 0) {
        return base::ErrnoStatus(-err,
                                 absl::StrCat("bpf_map__set_max_entries ", bpf_map__name(map)));
      }
      if (pin) {
        const std::string path = absl::StrCat(options.bpf_root, "/", bpf_map__name(map));
        if (int err = bpf_map__set_pin_path(map, path.c_str()); err != 0) {
          return base::ErrnoStatus(-err, absl::StrCat("bpf_map__set_pin_path ", path));
        }
      }
    }
    s.rodata->host_netns = host_netns;
    if (!reap) {
      bpf_program__set_autoload(s.progs.sluice_udp_reap, false);
    }
    if (earlier) {
      if (int err = bpf_map__reuse_fd(s.maps.sluice_lb_rev, earlier.get()); err != 0) {
        return base::ErrnoStatus(-err, "bpf_map__reuse_fd sluice_lb_rev");
      }
    } else {
      bpf_program__set_autoload(s.progs.sluice_tcp_adopt, false);
      bpf_program__set_autoload(s.progs.sluice_udp_adopt, false);
    }
    return absl::OkStatus();
  };
  auto skel = fastpath::Skeleton<sock_lb_bpf>::Create(configure);
  if (!skel.ok() && pin && absl::IsInvalidArgument(skel.status()) &&
      access(absl::StrCat(options.bpf_root, "/sluice_lb_svc").c_str(), F_OK) == 0) {
    // Typically maps pinned by another version with other sizes or layout: start afresh. The
    // old links keep their programs and maps until Attach replaces them.
    LOG(WARNING) << "socket LB: cannot reuse the maps pinned under " << options.bpf_root << " ("
                 << skel.status().message() << "); replacing them";
    for (const char* name : kMaps) {
      unlink(absl::StrCat(options.bpf_root, "/", name).c_str());
    }
    skel = fastpath::Skeleton<sock_lb_bpf>::Create(configure);
  }
  if (!skel.ok()) {
    return skel.status();
  }
  std::unique_ptr<SocketLb> lb(new SocketLb(options, std::move(*skel)));
  lb->ScanAdopted();
  RETURN_IF_ERROR(lb->Attach(cgroup_id, cgroup.get()));
  if (earlier) {
    lb->AdoptEarlierPairs();  // our hooks are attached: the old ones write no more pairs
  }
  if (pin) {
    RemoveStalePins(options.bpf_root, **lb->skel_);
  }
  if (reap) {
    lb->reap_link_.reset(bpf_program__attach_iter((*lb->skel_)->progs.sluice_udp_reap, nullptr));
    if (lb->reap_link_ == nullptr) {
      LOG(WARNING) << "socket LB: no UDP socket iterator (" << strerror(errno)
                   << "): connected UDP sockets keep a removed backend";
    }
  }
  return lb;
}

SocketLb::SocketLb(const Options& options, std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel)
    : options_(options),
      skel_(std::move(skel)),
      svc_fd_(bpf_map__fd((*skel_)->maps.sluice_lb_svc)),
      slot_fd_(bpf_map__fd((*skel_)->maps.sluice_lb_slot)),
      member_fd_(bpf_map__fd((*skel_)->maps.sluice_lb_member)),
      stats_fd_(bpf_map__fd((*skel_)->maps.sluice_lb_stats)),
      gone_fd_(bpf_map__fd((*skel_)->maps.sluice_lb_gone)),
      cpus_(static_cast<size_t>(std::max(libbpf_num_possible_cpus(), 1))) {}

SocketLb::~SocketLb() = default;

absl::Status SocketLb::Attach(uint64_t cgroup_id, int cgroup_fd) {
  for (bpf_program* prog : Hooks(**skel_)) {
    const std::string path = options_.bpf_root.empty() ? "" : LinkPin(options_.bpf_root, prog);
    if (!path.empty() && access(path.c_str(), F_OK) == 0) {
      if (fastpath::LinkPtr old(bpf_link__open(path.c_str())); old != nullptr) {
        bpf_link_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(bpf_link__fd(old.get()), &info, &len) == 0 &&
            info.type == BPF_LINK_TYPE_CGROUP && info.cgroup.cgroup_id == cgroup_id &&
            bpf_link__update_program(old.get(), prog) == 0) {
          links_.push_back(std::move(old));  // adopted: the hook never went away
          adopted_ = true;
          continue;
        }
      }
      unlink(path.c_str());  // another cgroup or an unusable link: detach it
    }
    fastpath::LinkPtr link(bpf_program__attach_cgroup(prog, cgroup_fd));
    if (link == nullptr) {
      return base::ErrnoStatus(
          errno, absl::StrCat("attach ", bpf_program__name(prog), " to ", options_.cgroup));
    }
    links_.push_back(std::move(link));
    if (!path.empty()) {
      if (int err = bpf_link__pin(links_.back().get(), path.c_str()); err != 0) {
        return base::ErrnoStatus(-err, absl::StrCat("pin ", path));
      }
    }
  }
  return absl::OkStatus();
}

void SocketLb::ScanAdopted() {
  uint32_t max_id = 0;
  uint32_t max_set = 0;
  for (const auto& key : Keys<sluice_lb_key>(svc_fd_)) {
    sluice_lb_svc v{};
    if (bpf_map_lookup_elem(svc_fd_, &key, &v) == 0) {
      max_id = std::max(max_id, v.id);
      max_set = std::max(max_set, v.set);
      adopted_ = true;
    }
  }
  for (const auto& slot : Keys<sluice_lb_slot>(slot_fd_)) {
    max_set = std::max(max_set, slot.set);
  }
  for (uint32_t id : Keys<uint32_t>(stats_fd_)) {
    max_id = std::max(max_id, id);
  }
  next_id_ = max_id + 1;
  next_set_ = max_set + 1;
}

void SocketLb::Sweep() {
  std::set<uint32_t> live_ids;
  std::set<uint32_t> live_sets;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, p] : programmed_) {
      live_ids.insert(p.id);
      live_sets.insert(p.set);
    }
  }
  for (const Retired& r : retired_) {
    live_sets.insert(r.set);
  }
  int removed = 0;
  // Every frontend this agent programs carries one of its ids (Upsert rewrote adopted ones).
  for (const auto& key : Keys<sluice_lb_key>(svc_fd_)) {
    sluice_lb_svc v{};
    if (bpf_map_lookup_elem(svc_fd_, &key, &v) == 0 && !live_ids.contains(v.id)) {
      removed += bpf_map_delete_elem(svc_fd_, &key) == 0;
    }
  }
  for (const auto& slot : Keys<sluice_lb_slot>(slot_fd_)) {
    if (!live_sets.contains(slot.set)) {
      removed += bpf_map_delete_elem(slot_fd_, &slot) == 0;
    }
  }
  for (const auto& m : Keys<sluice_lb_member>(member_fd_)) {
    if (!live_ids.contains(m.id)) {
      removed += bpf_map_delete_elem(member_fd_, &m) == 0;
    }
  }
  for (uint32_t id : Keys<uint32_t>(stats_fd_)) {
    if (!live_ids.contains(id)) {
      removed += bpf_map_delete_elem(stats_fd_, &id) == 0;
    }
  }
  if (removed > 0) {
    LOG(INFO) << "socket LB: removed " << removed << " map entries an earlier agent left";
  }
}

absl::Status SocketLb::WriteSet(uint32_t set, const std::vector<net::SocketAddress>& backends) {
  for (uint32_t i = 0; i < backends.size(); ++i) {
    const sluice_lb_slot slot{.set = set, .index = i};
    const sluice_lb_addr be = ToAddr(backends[i]);
    if (bpf_map_update_elem(slot_fd_, &slot, &be, BPF_ANY) != 0) {
      absl::Status st = fastpath::MapError("update sluice_lb_slot");
      FreeSet(set, i);
      return st;
    }
  }
  return absl::OkStatus();
}

void SocketLb::FreeSet(uint32_t set, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    const sluice_lb_slot slot{.set = set, .index = i};
    (void)bpf_map_delete_elem(slot_fd_, &slot);
  }
}

absl::Status SocketLb::SetMembers(uint32_t id, const Service* old_svc, const Service* new_svc) {
  auto members = [](const Service* s) {
    std::set<net::SocketAddress> out;
    if (s != nullptr && s->affinity > absl::ZeroDuration()) {
      out.insert(s->backends.begin(), s->backends.end());
    }
    return out;
  };
  const std::set<net::SocketAddress> had = members(old_svc);
  const std::set<net::SocketAddress> want = members(new_svc);
  const uint8_t one = 1;
  for (const auto& b : want) {
    if (!had.contains(b)) {
      const sluice_lb_member m{.id = id, .backend = ToAddr(b)};
      if (bpf_map_update_elem(member_fd_, &m, &one, BPF_ANY) != 0) {
        return fastpath::MapError("update sluice_lb_member");
      }
    }
  }
  for (const auto& b : had) {
    if (!want.contains(b)) {
      const sluice_lb_member m{.id = id, .backend = ToAddr(b)};
      (void)bpf_map_delete_elem(member_fd_, &m);
    }
  }
  return absl::OkStatus();
}

absl::Status SocketLb::Apply(const std::vector<Change>& changes) {
  // Programs that read a retired set's service value have long finished (they run under RCU
  // and a sync is at least a syscall round trip later); the program also re-reads the service
  // when a slot is missing.
  for (const Retired& r : retired_) {
    FreeSet(r.set, r.count);
  }
  retired_.clear();
  absl::Status result;
  std::vector<Gone> gone;
  for (const auto& [name, service] : changes) {
    result.Update(service ? Upsert(name, *service, gone) : Remove(name, gone));
  }
  if (absl::Status st = Reap(gone); !st.ok()) {
    // Best effort: the services are programmed; an unreachable namespace keeps its sockets.
    LOG(WARNING) << "socket LB: closing UDP sockets of removed backends: " << st;
  }
  return result;
}

absl::Status SocketLb::ApplyAll(const std::map<std::string, Service>& all) {
  std::vector<Change> changes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, p] : programmed_) {
      if (!all.contains(name)) {
        changes.emplace_back(name, std::nullopt);
      }
    }
  }
  for (const auto& [name, service] : all) {
    changes.emplace_back(name, service);
  }
  absl::Status result = Apply(changes);
  if (result.ok() && adopted_ && !swept_) {
    swept_ = true;
    Sweep();
  }
  return result;
}

void SocketLb::AppendGone(const Service& had, const Service* now, std::vector<Gone>& gone) {
  // Connected UDP sockets aimed at a backend that left never connect again by themselves;
  // TCP connections are left to finish, as on the proxy path.
  for (const Frontend& f : had.frontends) {
    if (!f.udp) {
      continue;
    }
    for (const auto& b : had.backends) {
      if (now == nullptr ||
          std::find(now->backends.begin(), now->backends.end(), b) == now->backends.end()) {
        gone.push_back({f.address, b});
      }
    }
  }
}

absl::Status SocketLb::Upsert(const std::string& name, const Service& service,
                              std::vector<Gone>& gone) {
  std::optional<Programmed> old;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = programmed_.find(name); it != programmed_.end()) {
      if (it->second.service == service) {
        return absl::OkStatus();
      }
      old = it->second;
    }
  }
  Programmed next{.id = old ? old->id : next_id_++, .set = old ? old->set : 0, .service = service};
  if (!old) {
    // A per-CPU value is one struct per possible CPU. Counters are best effort: a service
    // whose entry could not be made works uncounted.
    const std::vector<sluice_lb_stats> zero(cpus_);
    (void)bpf_map_update_elem(stats_fd_, &next.id, zero.data(), BPF_ANY);
  }
  const bool new_set = !old || old->service.backends != service.backends;
  if (new_set) {
    next.set = next_set_++;
    RETURN_IF_ERROR(WriteSet(next.set, service.backends));
  }
  RETURN_IF_ERROR(SetMembers(next.id, old ? &old->service : nullptr, &service));
  const sluice_lb_svc value{
      .id = next.id,
      .set = next.set,
      .count = static_cast<uint32_t>(service.backends.size()),
      .affinity = static_cast<uint32_t>(absl::ToInt64Seconds(service.affinity)),
      .flags = service.random ? static_cast<uint32_t>(SLUICE_LB_RANDOM) : 0u,
      .next = 0};
  absl::Status result;
  for (const Frontend& f : service.frontends) {
    const sluice_lb_key key = ToKey(f);
    if (bpf_map_update_elem(svc_fd_, &key, &value, BPF_ANY) != 0) {
      result.Update(fastpath::MapError("update sluice_lb_svc"));
    }
  }
  if (old) {
    for (const Frontend& f : old->service.frontends) {
      if (std::find(service.frontends.begin(), service.frontends.end(), f) ==
          service.frontends.end()) {
        const sluice_lb_key key = ToKey(f);
        (void)bpf_map_delete_elem(svc_fd_, &key);
      }
    }
    if (new_set) {
      retired_.push_back({old->set, static_cast<uint32_t>(old->service.backends.size())});
    }
    AppendGone(old->service, &service, gone);
  }
  absl::MutexLock lock(&mu_);
  programmed_[name] = std::move(next);
  return result;
}

absl::Status SocketLb::Remove(const std::string& name, std::vector<Gone>& gone) {
  Programmed old;
  {
    absl::MutexLock lock(&mu_);
    auto it = programmed_.find(name);
    if (it == programmed_.end()) {
      return absl::OkStatus();
    }
    old = std::move(it->second);
    programmed_.erase(it);
  }
  for (const Frontend& f : old.service.frontends) {
    const sluice_lb_key key = ToKey(f);
    (void)bpf_map_delete_elem(svc_fd_, &key);
  }
  retired_.push_back({old.set, static_cast<uint32_t>(old.service.backends.size())});
  AppendGone(old.service, nullptr, gone);
  RETURN_IF_ERROR(SetMembers(old.id, &old.service, nullptr));
  (void)bpf_map_delete_elem(stats_fd_, &old.id);
  return absl::OkStatus();
}

absl::Status SocketLb::Reap(const std::vector<Gone>& gone) {
  if (reap_link_ == nullptr) {
    return absl::OkStatus();
  }
  // sluice_lb_gone holds kGoneBatch pairs: a larger change (a Service with many UDP ports losing
  // many endpoints) is walked in batches rather than crowding out the other services' pairs.
  absl::Status result;
  for (size_t at = 0; at < gone.size(); at += kGoneBatch) {
    result.Update(ReapBatch(std::span(gone).subspan(at, std::min(kGoneBatch, gone.size() - at))));
  }
  return result;
}

absl::Status SocketLb::ReapBatch(std::span<const Gone> gone) {
  const uint8_t one = 1;
  std::vector<sluice_lb_gone> keys;
  absl::Status result;
  for (const auto& g : gone) {
    keys.push_back({.front = ToAddr(g.front), .backend = ToAddr(g.backend)});
    if (bpf_map_update_elem(gone_fd_, &keys.back(), &one, BPF_ANY) != 0) {
      result = fastpath::MapError("update sluice_lb_gone");  // out of memory: these stay open
      keys.pop_back();
      break;
    }
  }
  result.Update(WalkSocketsEverywhere(reap_link_.get()));
  for (const auto& k : keys) {
    (void)bpf_map_delete_elem(gone_fd_, &k);
  }
  return result;
}

void SocketLb::AdoptEarlierPairs() {
  sock_lb_bpf& s = **skel_;
  absl::Status result;
  for (bpf_program* prog : {s.progs.sluice_tcp_adopt, s.progs.sluice_udp_adopt}) {
    fastpath::LinkPtr link(bpf_program__attach_iter(prog, nullptr));
    result.Update(link
                      ? WalkSocketsEverywhere(link.get())
                      : base::ErrnoStatus(errno, absl::StrCat("attach ", bpf_program__name(prog))));
  }
  LOG(INFO) << "socket LB: " << s.bss->adopted
            << " connected sockets translated by an earlier version keep their service address";
  if (!result.ok()) {
    // Best effort: those not reached report their backend to getpeername() and stay open if
    // their (UDP) backend leaves.
    LOG(WARNING) << "socket LB: adopting an earlier version's sockets: " << result;
  }
}

uint64_t SocketLb::reaped() const {
  return __atomic_load_n(&(*skel_)->bss->reaped, __ATOMIC_RELAXED);  // the program's counter
}

std::map<std::string, SocketLb::Counts> SocketLb::Counters() const {
  // Names under the lock, counters after it, in batches: with 10,000 services one lookup per
  // service made a scrape take ~80 ms and held up Upsert for all of it.
  absl::flat_hash_map<uint32_t, Counts*> by_id;
  std::map<std::string, Counts> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, p] : programmed_) {
      by_id[p.id] = &out.emplace(name, Counts{}).first->second;
    }
  }
  constexpr uint32_t kBatch = 1024;
  std::vector<uint32_t> keys(kBatch);
  std::vector<sluice_lb_stats> values(kBatch * cpus_);
  uint32_t cursor = 0;
  for (bool first = true, more = true; more; first = false) {
    uint32_t count = kBatch;
    const int err = bpf_map_lookup_batch(stats_fd_, first ? nullptr : &cursor, &cursor, keys.data(),
                                         values.data(), &count, nullptr);
    more = err == 0;  // ENOENT: this was the last batch; anything else: give up for this scrape
    if (err != 0 && errno != ENOENT) {
      break;
    }
    for (uint32_t i = 0; i < count; ++i) {
      auto it = by_id.find(keys[i]);
      if (it == by_id.end()) {
        continue;  // an id being added or removed right now
      }
      Counts& c = *it->second;
      for (size_t cpu = 0; cpu < cpus_; ++cpu) {
        c.translated += values[i * cpus_ + cpu].translated;
        c.refused += values[i * cpus_ + cpu].refused;
      }
    }
  }
  return out;
}

std::map<std::string, std::vector<std::string>> SocketLb::Frontends() const {
  std::map<std::string, std::vector<std::string>> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, p] : programmed_) {
    auto& list = out[name];
    for (const Frontend& f : p.service.frontends) {
      list.push_back(FrontendName(f));
    }
  }
  return out;
}

absl::Status SocketLb::Cleanup(const std::string& bpf_root) {
  std::error_code ec;
  if (!fs::exists(bpf_root, ec)) {
    return absl::OkStatus();
  }
  absl::Status result;
  for (const auto& entry : fs::directory_iterator(bpf_root, ec)) {
    // Only ours: a new bpffs instance also holds the kernel's maps.debug and progs.debug.
    const std::string name = entry.path().filename();
    if (name.rfind("sluice_lb_", 0) != 0 && name.rfind("link_sluice_", 0) != 0) {
      continue;
    }
    if (unlink(entry.path().c_str()) != 0) {
      result.Update(base::ErrnoStatus(errno, absl::StrCat("unlink ", entry.path().string())));
    }
  }
  if (ec) {
    result.Update(absl::InternalError(absl::StrCat("list ", bpf_root, ": ", ec.message())));
  }
  (void)rmdir(bpf_root.c_str());  // fails, harmlessly, where a bpffs is mounted on it
  return result;
}

}  // namespace sluice::socklb
