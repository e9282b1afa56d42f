// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/extnat/nat_object.h"

#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include <bpf/btf.h>

#include "agent/dataplane/socklb/sock_lb_object.h"
#include "bpf/ext_nat.skel.h"
#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::extnat {

static_assert(sizeof(sluice_nat_range) == 40, "bpf_abi.h: struct sluice_nat_range");
static_assert(sizeof(sluice_nat_client) == 20, "bpf_abi.h: struct sluice_nat_client");
static_assert(sizeof(sluice_nat_tuple) == 40, "bpf_abi.h: struct sluice_nat_tuple");
static_assert(sizeof(sluice_nat_ct) == 56, "bpf_abi.h: struct sluice_nat_ct");
static_assert(sizeof(sluice_nat_traffic) == 16, "bpf_abi.h: struct sluice_nat_traffic");
static_assert(sizeof(sluice_nat_host) == 16, "bpf_abi.h: struct sluice_nat_host");
static_assert(sizeof(sluice_nat_ifaddr) == 32, "bpf_abi.h: struct sluice_nat_ifaddr");

namespace {

namespace fs = std::filesystem;

// Our tc filters: a fixed handle and priority, so a restarted agent replaces its predecessor's
// filter in place (BPF_TC_F_REPLACE: no moment without one) and RemoveAll finds them. Priority
// 1 runs before filters added with tc's defaults (49152 and up).
constexpr uint32_t kHandle = 0x5c1e;
constexpr uint32_t kPriority = 1;
constexpr char kIngressName[] = "sluice_nat_in";
constexpr char kEgressName[] = "sluice_nat_out";
constexpr char kPinPrefix[] = "sluice_nat_";

// Devices with SNAT addresses: those the programs are attached to (a node has a handful).
constexpr uint32_t kMaxSnatDevices = 1024;

std::string PinDir(const std::string& bpf_root) { return bpf_root + "/ext_nat"; }

// BPF_F_IPV6 (kernel 6.16) where the running kernel's BTF knows the enumerator; older kernels
// reject unknown bpf_l4_csum_replace flags.
uint64_t CsumV6Flag() {
  btf* vmlinux = btf__load_vmlinux_btf();
  if (vmlinux == nullptr) {
    return 0;
  }
  uint64_t flag = 0;
  const uint32_t n = btf__type_cnt(vmlinux);
  for (uint32_t id = 1; id < n && flag == 0; ++id) {
    const btf_type* t = btf__type_by_id(vmlinux, id);
    if (!btf_is_enum(t)) {
      continue;
    }
    const struct btf_enum* e = btf_enum(t);
    for (uint16_t i = 0; i < btf_vlen(t); ++i) {
      if (std::strcmp(btf__name_by_offset(vmlinux, e[i].name_off), "BPF_F_IPV6") == 0) {
        flag = static_cast<uint32_t>(e[i].val);
        break;
      }
    }
  }
  btf__free(vmlinux);
  return flag;
}

// Whether the map pinned at `path` is what `map` asks for; libbpf refuses to reuse it otherwise.
bool PinFits(const std::string& path, const bpf_map* map) {
  base::UniqueFd fd(bpf_obj_get(path.c_str()));
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  return fd && bpf_obj_get_info_by_fd(fd.get(), &info, &len) == 0 &&
         info.type == bpf_map__type(map) && info.key_size == bpf_map__key_size(map) &&
         info.value_size == bpf_map__value_size(map) &&
         info.max_entries == bpf_map__max_entries(map) && info.map_flags == bpf_map__map_flags(map);
}

absl::StatusOr<int> IfIndex(const std::string& device) {
  const unsigned index = if_nametoindex(device.c_str());
  if (index == 0) {
    return absl::NotFoundError(absl::StrCat("device ", device, ": ", strerror(errno)));
  }
  return static_cast<int>(index);
}

// The programs take the IP header to follow an Ethernet header (loopback has one too).
absl::Status CheckEthernet(const std::string& device) {
  base::UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ifreq req{};
  std::strncpy(req.ifr_name, device.c_str(), IFNAMSIZ - 1);
  if (!s || ioctl(s.get(), SIOCGIFHWADDR, &req) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("SIOCGIFHWADDR ", device));
  }
  const int type = req.ifr_hwaddr.sa_family;
  if (type != ARPHRD_ETHER && type != ARPHRD_LOOPBACK) {
    return absl::FailedPreconditionError(
        absl::StrCat("external NAT on ", device, ": not an Ethernet device (type ", type, ")"));
  }
  return absl::OkStatus();
}

bpf_tc_hook Hook(int ifindex, bpf_tc_attach_point point) {
  bpf_tc_hook hook{};
  hook.sz = sizeof(hook);
  hook.ifindex = ifindex;
  hook.attach_point = point;
  return hook;
}

bpf_tc_opts Opts(int prog_fd, uint32_t flags) {
  bpf_tc_opts opts{};
  opts.sz = sizeof(opts);
  opts.prog_fd = prog_fd;
  opts.flags = flags;
  opts.handle = kHandle;
  opts.priority = kPriority;
  return opts;
}

// The name of the program in our filter slot of `hook`, or "" when there is none.
std::string FilterProgram(bpf_tc_hook& hook) {
  bpf_tc_opts opts = Opts(0, 0);
  if (bpf_tc_query(&hook, &opts) != 0) {
    return "";
  }
  base::UniqueFd prog(bpf_prog_get_fd_by_id(opts.prog_id));
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (!prog || bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0) {
    return "";
  }
  return info.name;
}

// Removes our filter from `hook`; absent is fine.
absl::Status DetachFilter(bpf_tc_hook hook, const std::string& device) {
  bpf_tc_opts opts = Opts(0, 0);
  if (int err = bpf_tc_detach(&hook, &opts); err != 0 && err != -ENOENT && err != -EINVAL) {
    // EINVAL: no clsact qdisc on the device at all.
    return base::ErrnoStatus(-err, absl::StrCat("detach external NAT from ", device));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NatObject>> NatObject::Load(const LoadOptions& options) {
  const bool pin = !options.bpf_root.empty();
  const std::string dir = PinDir(options.bpf_root);
  if (pin) {
    RETURN_IF_ERROR(socklb::EnsureBpfFs(options.bpf_root));
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
    }
  }
  const uint64_t csum_v6_flag = CsumV6Flag();
  bool adopted = false;
  auto configure = [&](ext_nat_bpf& s) -> absl::Status {
    const std::pair<bpf_map*, uint32_t> maps[] = {
        {s.maps.sluice_nat_svc, options.max_frontends},
        {s.maps.sluice_nat_slot, options.max_slots},
        {s.maps.sluice_nat_member, options.max_slots},
        {s.maps.sluice_nat_stats, options.max_frontends},
        {s.maps.sluice_nat_range, options.max_frontends},
        {s.maps.sluice_nat_sticky, options.max_affinity},
        {s.maps.sluice_nat_ct, options.max_flows},
        {s.maps.sluice_nat_traffic, options.max_frontends},
        {s.maps.sluice_nat_rmt, options.max_slots},
        {s.maps.sluice_nat_snat, kMaxSnatDevices},
        {s.maps.sluice_nat_drops, 0}};  // 0: its size is the ABI's SLUICE_NAT_REASONS
    for (auto [map, size] : maps) {
      if (int err = size == 0 ? 0 : bpf_map__set_max_entries(map, size); err != 0) {
        return base::ErrnoStatus(-err,
                                 absl::StrCat("bpf_map__set_max_entries ", bpf_map__name(map)));
      }
      if (!pin) {
        continue;
      }
      const std::string path = absl::StrCat(dir, "/", bpf_map__name(map));
      if (access(path.c_str(), F_OK) == 0) {
        if (PinFits(path, map)) {
          adopted = true;
        } else {
          // Other sizes (changed flags) or another layout: the old map cannot be reused.
          LOG(WARNING) << "external NAT: " << path << " has another type or size; replacing it"
                       << (map == s.maps.sluice_nat_ct ? " (the flows it tracked are lost)" : "");
          unlink(path.c_str());
        }
      }
      if (int err = bpf_map__set_pin_path(map, path.c_str()); err != 0) {
        return base::ErrnoStatus(-err, absl::StrCat("bpf_map__set_pin_path ", path));
      }
    }
    s.rodata->tcp_established_ns = absl::ToInt64Nanoseconds(options.tcp_established);
    s.rodata->tcp_close_wait_ns = absl::ToInt64Nanoseconds(options.tcp_close_wait);
    s.rodata->tcp_closed_ns = absl::ToInt64Nanoseconds(options.tcp_closed);
    s.rodata->udp_ns = absl::ToInt64Nanoseconds(options.udp);
    s.rodata->csum_v6_flag = csum_v6_flag;
    s.rodata->snat_port_min = options.snat_port_min;
    s.rodata->snat_port_max = options.snat_port_max;
    s.rodata->fib_forward = options.fib_forward ? 1 : 0;
    return absl::OkStatus();
  };
  if (options.snat_port_min == 0 || options.snat_port_min > options.snat_port_max ||
      options.snat_port_max > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("external NAT: SNAT port range ",
                                                   options.snat_port_min, "-",
                                                   options.snat_port_max, " is not a range"));
  }
  ASSIGN_OR_RETURN(auto skel, fastpath::Skeleton<ext_nat_bpf>::Create(configure));
  std::unique_ptr<NatObject> object(new NatObject(options, std::move(skel)));
  object->adopted_maps_ = adopted;
  return object;
}

NatObject::NatObject(const LoadOptions& options,
                     std::unique_ptr<fastpath::Skeleton<ext_nat_bpf>> skel)
    : options_(options), skel_(std::move(skel)) {}

NatObject::~NatObject() = default;

absl::Status NatObject::Attach(const std::string& device) {
  ASSIGN_OR_RETURN(const int ifindex, IfIndex(device));
  RETURN_IF_ERROR(CheckEthernet(device));
  const std::pair<bpf_tc_attach_point, bpf_program*> filters[] = {
      {BPF_TC_INGRESS, (*skel_)->progs.sluice_nat_in},
      {BPF_TC_EGRESS, (*skel_)->progs.sluice_nat_out}};
  // The clsact qdisc once per link: an existing one is an error libbpf logs ("Exclusivity flag
  // on, cannot modify"), which the re-attach at every full sync would repeat. By ifindex: a
  // link deleted and made again under the same name has a new one.
  if (!clsact_.contains(ifindex)) {
    bpf_tc_hook hook =
        Hook(ifindex, static_cast<bpf_tc_attach_point>(BPF_TC_INGRESS | BPF_TC_EGRESS));
    if (int err = bpf_tc_hook_create(&hook); err != 0 && err != -EEXIST) {
      return base::ErrnoStatus(-err, absl::StrCat("create clsact qdisc on ", device));
    }
    clsact_.insert(ifindex);
  }
  // Egress first: a flow the new ingress filter creates finds its reply translation in place.
  for (int i = 1; i >= 0; --i) {
    bpf_tc_hook hook = Hook(ifindex, filters[i].first);
    bpf_tc_opts opts = Opts(bpf_program__fd(filters[i].second), BPF_TC_F_REPLACE);
    if (int err = bpf_tc_attach(&hook, &opts); err != 0) {
      return base::ErrnoStatus(
          -err, absl::StrCat("attach ", bpf_program__name(filters[i].second), " to ", device));
    }
  }
  if (std::find(devices_.begin(), devices_.end(), device) == devices_.end()) {
    devices_.push_back(device);
  }
  return absl::OkStatus();
}

absl::Status NatObject::Detach(const std::string& device) {
  devices_.erase(std::remove(devices_.begin(), devices_.end(), device), devices_.end());
  auto ifindex = IfIndex(device);
  if (!ifindex.ok()) {
    return absl::OkStatus();  // the device went, and its filters with it
  }
  absl::Status result = DetachFilter(Hook(*ifindex, BPF_TC_INGRESS), device);
  result.Update(DetachFilter(Hook(*ifindex, BPF_TC_EGRESS), device));
  return result;
}

std::vector<std::string> NatObject::Devices() const { return devices_; }

absl::Status NatObject::RemoveAll(const std::string& bpf_root) {
  absl::Status result;
  int detached = 0;
  if (struct if_nameindex* links = if_nameindex(); links != nullptr) {
    for (const struct if_nameindex* l = links; l->if_index != 0; ++l) {
      for (auto [point, name] :
           {std::pair{BPF_TC_INGRESS, kIngressName}, std::pair{BPF_TC_EGRESS, kEgressName}}) {
        bpf_tc_hook hook = Hook(static_cast<int>(l->if_index), point);
        if (FilterProgram(hook) != name) {
          continue;  // none in our slot, or another program's filter
        }
        absl::Status st = DetachFilter(hook, l->if_name);
        detached += st.ok();
        result.Update(st);
      }
    }
    if_freenameindex(links);
  } else {
    result.Update(base::ErrnoStatus(errno, "if_nameindex"));
  }
  int unpinned = 0;
  if (!bpf_root.empty()) {
    const std::string dir = PinDir(bpf_root);
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().filename().string().rfind(kPinPrefix, 0) != 0) {
        continue;
      }
      if (unlink(entry.path().c_str()) != 0) {
        result.Update(base::ErrnoStatus(errno, absl::StrCat("unlink ", entry.path().string())));
      } else {
        ++unpinned;
      }
    }
    (void)rmdir(dir.c_str());  // absent, or something not ours left in it
  }
  if (detached > 0 || unpinned > 0) {
    LOG(INFO) << "external NAT: removed " << detached << " tc filters and " << unpinned
              << " pinned maps";
  }
  return result;
}

}  // namespace sluice::extnat
