// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/sock_lb_object.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/capabilities.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include <bpf/btf.h>

#include "agent/dataplane/socklb/cgroup.h"
#include "agent/dataplane/socklb/socket_walk.h"
#include "agent/dataplane/socklb/udp_reaper.h"
#include "bpf/include/sluice/bpf_abi.h"
#include "bpf/sock_lb.skel.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71  // linux/socket.h, kernel 5.14; glibc 2.36 lacks it
#endif

namespace sluice::socklb {

static_assert(sizeof(sluice_lb_rev) == 32, "bpf_abi.h: struct sluice_lb_rev");

namespace {

namespace fs = std::filesystem;

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

}  // namespace

absl::StatusOr<std::unique_ptr<SockLbObject>> SockLbObject::Load(const LoadOptions& options) {
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
                                                  {s.maps.sluice_lb_gone, UdpReaper::kBatch},
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
  std::unique_ptr<SockLbObject> lb(new SockLbObject(options, std::move(*skel)));
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

SockLbObject::SockLbObject(const LoadOptions& options,
                           std::unique_ptr<fastpath::Skeleton<sock_lb_bpf>> skel)
    : options_(options), skel_(std::move(skel)) {}

SockLbObject::~SockLbObject() = default;

absl::Status SockLbObject::Attach(uint64_t cgroup_id, int cgroup_fd) {
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
          adopted_links_ = true;
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

void SockLbObject::AdoptEarlierPairs() {
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

absl::Status SockLbObject::RemovePinned(const std::string& bpf_root) {
  std::error_code ec;
  if (!fs::exists(bpf_root, ec)) {
    return absl::OkStatus();
  }
  std::vector<fs::path> ours;
  for (const auto& entry : fs::directory_iterator(bpf_root, ec)) {
    // Only ours: a new bpffs instance also holds the kernel's maps.debug and progs.debug.
    const std::string name = entry.path().filename();
    if (name.rfind("sluice_lb_", 0) == 0 || name.rfind("link_sluice_", 0) == 0) {
      ours.push_back(entry.path());
    }
  }
  absl::Status result;
  if (ec) {
    result.Update(absl::InternalError(absl::StrCat("list ", bpf_root, ": ", ec.message())));
  }
  int detached = 0;
  for (const fs::path& path : ours) {
    // An unpinned link detaches only once no fd refers to it either (a hung earlier agent, a
    // bpftool): BPF_LINK_DETACH ends the hook now. Without CAP_BPF only unpinning is left.
    if (path.filename().string().rfind("link_", 0) == 0) {
      base::UniqueFd link(bpf_obj_get(path.c_str()));
      detached += link && bpf_link_detach(link.get()) == 0;
    }
  }
  for (const fs::path& path : ours) {
    if (unlink(path.c_str()) != 0) {
      result.Update(base::ErrnoStatus(errno, absl::StrCat("unlink ", path.string())));
    }
  }
  if (!ours.empty()) {
    LOG(INFO) << "socket LB: removed the " << ours.size() << " objects pinned under " << bpf_root
              << " (" << detached << " hooks detached)";
  }
  (void)rmdir(bpf_root.c_str());  // fails, harmlessly, where a bpffs is mounted on it
  return result;
}

namespace {

bool OnBpfFs(const fs::path& dir) {
  struct statfs st;
  return statfs(dir.c_str(), &st) == 0 && st.f_type == BPF_FS_MAGIC;
}

absl::Status MountBpfFs(const fs::path& at) {
  if (mount("bpf", at.c_str(), "bpf", 0, "mode=0700") != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("mount bpffs on ", at.string()));
  }
  LOG(INFO) << "socket LB: " << at.string() << " was not on a bpffs: mounted one there";
  return absl::OkStatus();
}

}  // namespace

absl::Status EnsureBpfFs(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (!ec) {
    return OnBpfFs(root) ? absl::OkStatus() : MountBpfFs(root);
  }
  // Typically /sys/fs/bpf/<dir> with nothing mounted on /sys/fs/bpf (a node without systemd):
  // sysfs takes no mkdir, but its /sys/fs/bpf is an empty directory made to mount a bpffs on.
  fs::path at(root);
  std::error_code exists_ec;
  while (at.has_relative_path() && !fs::exists(at, exists_ec)) {
    at = at.parent_path();
  }
  std::error_code dir_ec;
  if (OnBpfFs(at) || !fs::is_directory(at, dir_ec) || !fs::is_empty(at, dir_ec) || dir_ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("bpffs for --bpf-root: mkdir ", root, ": ", ec.message()));
  }
  RETURN_IF_ERROR(MountBpfFs(at));
  if (fs::create_directories(root, ec); ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("bpffs for --bpf-root: mkdir ", root, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace sluice::socklb
