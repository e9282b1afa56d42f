// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/extnat/ext_nat.h"

#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "lib/base/log.h"

#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::extnat {

static_assert(sizeof(sluice_nat_traffic) == 16, "bpf_abi.h: struct sluice_nat_traffic");

namespace {

// Drop labels of the metrics, by index of sluice_nat_drops.
constexpr std::array<std::pair<uint32_t, const char*>, 8> kReasons = {{
    {SLUICE_NAT_SOURCE_RANGE, "source_range"},
    {SLUICE_NAT_CT_FULL, "conntrack_full"},
    {SLUICE_NAT_FRAGMENT, "fragment"},
    {SLUICE_NAT_MALFORMED, "malformed"},
    {SLUICE_NAT_SNAT_PORTS, "snat_ports"},
    {SLUICE_NAT_NO_ROUTE, "no_route"},
    {SLUICE_NAT_MTU, "mtu"},
    {SLUICE_NAT_MTU_ICMP, "mtu_icmp"},
}};
static_assert(kReasons.size() == SLUICE_NAT_REASONS, "a reason without a label");

socklb::Service Translate(const Service& s) {
  return {
      .frontends = s.frontends, .backends = s.backends, .affinity = s.affinity, .random = s.random};
}

// The frontends of `s` with source ranges; an empty list takes every source, as kube-proxy
// reads an empty loadBalancerSourceRanges.
Guards GuardsOf(const Service& s) {
  Guards out;
  for (const socklb::Frontend& f : s.frontends) {
    if (auto it = s.source_ranges.find(f.address.ip());
        it != s.source_ranges.end() && !it->second.empty()) {
      out.emplace(f, it->second);
    }
  }
  return out;
}

Guards GuardsOf(const std::optional<Service>& s) { return s ? GuardsOf(*s) : Guards{}; }

sluice_nat_host Host(const net::IpAddress& ip) {
  sluice_nat_host h{};
  const sluice_lb_addr a = socklb::LbAddr(net::SocketAddress(ip, 0));
  std::memcpy(h.addr, a.addr, sizeof(h.addr));
  return h;
}

std::vector<net::IpAddress> Sorted(std::vector<net::IpAddress> ips) {
  std::sort(ips.begin(), ips.end());
  ips.erase(std::unique(ips.begin(), ips.end()), ips.end());
  return ips;
}

}  // namespace

ExtNat::ExtNat(Maps maps, const LoadOptions& options)
    : maps_(maps),
      services_(maps.services),
      ranges_(maps.ranges),
      flows_(maps.flows, {.tcp_established = options.tcp_established,
                          .tcp_close_wait = options.tcp_close_wait,
                          .tcp_closed = options.tcp_closed,
                          .udp = options.udp}) {
  SLUICE_CHECK(maps.traffic.key_size() == sizeof(uint32_t) &&
               maps.traffic.value_size() % sizeof(sluice_nat_traffic) == 0)
      << maps.traffic.name();
  SLUICE_CHECK(maps.drops.key_size() == sizeof(uint32_t) &&
               maps.drops.value_size() % sizeof(uint64_t) == 0)
      << maps.drops.name();
  SLUICE_CHECK(maps.remote.key_size() == sizeof(sluice_nat_host) && maps.remote.value_size() == 1)
      << maps.remote.name();
  SLUICE_CHECK(maps.snat.key_size() == sizeof(uint32_t) &&
               maps.snat.value_size() == sizeof(sluice_nat_ifaddr))
      << maps.snat.name();
}

std::unique_ptr<ExtNat> ExtNat::ForMaps(Maps maps, const LoadOptions& options) {
  return std::unique_ptr<ExtNat>(new ExtNat(maps, options));
}

ExtNat::~ExtNat() = default;

absl::Status ExtNat::SetDevices(const std::vector<std::string>& devices) {
  if (object_ == nullptr) {
    devices_ = devices;
    return absl::OkStatus();
  }
  absl::Status first;
  for (const std::string& d : object_->Devices()) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) {
      if (absl::Status st = object_->Detach(d); !st.ok()) {
        LOG(WARNING) << "external NAT: detaching from " << d << ": " << st;
        first.Update(st);
      }
    }
  }
  for (const std::string& d : devices) {
    if (absl::Status st = object_->Attach(d); !st.ok()) {
      // Its remote clients go on reaching the proxy; the other devices still translate.
      LOG(WARNING) << "external NAT: skipping device " << d << ": " << st;
      first.Update(st);
    }
  }
  return first;
}

std::vector<std::string> ExtNat::Devices() const {
  return object_ != nullptr ? object_->Devices() : devices_;
}

absl::Status ExtNat::SetSnatDevices(const std::vector<SnatDevice>& devices) {
  std::map<uint32_t, sluice_nat_ifaddr> want;
  for (const SnatDevice& d : devices) {
    const unsigned ifindex = if_nametoindex(d.device.c_str());
    if (ifindex == 0) {
      LOG(WARNING) << "external NAT: no device " << d.device << " for its SNAT addresses";
      continue;
    }
    sluice_nat_ifaddr a{};
    if (d.v4) {
      std::memcpy(a.v4, Host(*d.v4).addr, sizeof(a.v4));
    }
    if (d.v6) {
      std::memcpy(a.v6, Host(*d.v6).addr, sizeof(a.v6));
    }
    want.emplace(ifindex, a);
  }
  absl::Status first;
  for (const auto& [ifindex, a] : want) {
    auto it = snat_.find(ifindex);
    if (it == snat_.end() || std::memcmp(&it->second, &a, sizeof(a)) != 0) {
      first.Update(maps_.snat.Update(&ifindex, &a, BPF_ANY));
    }
  }
  // Whatever else is there goes, an earlier agent's included.
  std::vector<uint32_t> stale;
  first.Update(maps_.snat.ForEach([&](const void* key, const void*) {
    uint32_t ifindex;
    std::memcpy(&ifindex, key, sizeof(ifindex));
    if (!want.contains(ifindex)) {
      stale.push_back(ifindex);
    }
  }));
  for (uint32_t ifindex : stale) {
    (void)maps_.snat.Delete(&ifindex);
  }
  snat_ = std::move(want);
  return first;
}

void ExtNat::ListRemote(const std::vector<Change>& changes, Plan& plan) {
  for (size_t i = 0; i < changes.size(); ++i) {
    const auto& [name, service] = changes[i];
    std::vector<net::IpAddress> ips =
        service ? Sorted(service->remote) : std::vector<net::IpAddress>{};
    std::vector<net::IpAddress> listed;
    absl::Status st;
    for (const net::IpAddress& ip : ips) {
      if (remote_refs_[ip] == 0) {
        const sluice_nat_host key = Host(ip);
        const uint8_t one = 1;
        st = maps_.remote.Update(&key, &one, BPF_ANY);
        if (!st.ok()) {
          break;
        }
      }
      ++remote_refs_[ip];
      listed.push_back(ip);
    }
    if (!st.ok()) {
      // Translated without SNAT, a remote backend's replies would bypass this node.
      LOG(WARNING) << "external NAT: remote backends of " << name
                   << " not listed, left to the proxy: " << st;
      plan.status.Update(st);
      plan.services[i].second = std::nullopt;
    }
    plan.remote.emplace_back(name, std::move(listed));
  }
}

void ExtNat::UnlistRemote(const Plan& plan) {
  for (const auto& [name, listed] : plan.remote) {
    auto old = remote_.find(name);
    if (old != remote_.end()) {
      for (const net::IpAddress& ip : old->second) {
        if (--remote_refs_[ip] <= 0) {
          remote_refs_.erase(ip);
          const sluice_nat_host key = Host(ip);
          (void)maps_.remote.Delete(&key);
        }
      }
    }
    if (listed.empty()) {
      remote_.erase(name);
    } else {
      remote_[name] = listed;
    }
  }
}

void ExtNat::SweepRemote() {
  std::vector<sluice_nat_host> stale;
  (void)maps_.remote.ForEach([&](const void* key, const void*) {
    sluice_nat_host h;
    std::memcpy(&h, key, sizeof(h));
    const bool v4 = std::memcmp(h.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0;
    auto ip = v4 ? net::IpAddress::FromBytes(AF_INET, h.addr + 12, 4)
                 : net::IpAddress::FromBytes(AF_INET6, h.addr, 16);
    if (!ip || !remote_refs_.contains(*ip)) {
      stale.push_back(h);
    }
  });
  for (const sluice_nat_host& h : stale) {
    (void)maps_.remote.Delete(&h);
  }
}

ExtNat::Plan ExtNat::Guard(const std::vector<Change>& changes) {
  Plan plan;
  for (const auto& [name, service] : changes) {
    if (!service) {
      plan.services.emplace_back(name, std::nullopt);
      continue;
    }
    socklb::Service lb = Translate(*service);
    const Guards guards = GuardsOf(*service);
    if (absl::Status st = ranges_.Add(name, guards); !st.ok()) {
      // Never served without its guard: the stack (the proxy) gets those frontends' traffic.
      LOG(WARNING) << "external NAT: source ranges of " << name
                   << " not written, its guarded frontends left to the proxy: " << st;
      plan.status.Update(st);
      plan.unguarded.insert(name);
      std::erase_if(lb.frontends, [&](const socklb::Frontend& f) { return guards.contains(f); });
    }
    plan.services.emplace_back(name, std::move(lb));
  }
  return plan;
}

void ExtNat::Settle(const std::vector<Change>& changes, const Plan& plan, bool programmed) {
  // After a failed sync the old guards stay beside the new ones (stricter, never looser) until
  // one succeeds.
  bool added = false;
  for (const auto& [name, service] : changes) {
    if (programmed && !plan.unguarded.contains(name)) {
      ranges_.Trim(name, GuardsOf(service));
    }
    if (service) {
      added = added || !traffic_ids_.contains(name);
    } else if (auto it = traffic_ids_.find(name); it != traffic_ids_.end()) {
      (void)maps_.traffic.Delete(&it->second);
      traffic_ids_.erase(it);
    }
  }
  if (!added) {
    return;
  }
  // The programs create a port's counters at its first packet (traffic_count): creating them
  // here cost a cold start ~25 us per port in the kernel's per-CPU allocator (235 ms of 10,000
  // ports, docs/performance.md). Adopted maps may hold an earlier agent's under an id new to
  // this one: removed, so the port counts from zero. Best effort, as ServiceMaps' counters.
  const bool adopted_maps = adopted();
  const socklb::ServiceMaps::IdMap ids = services_.Ids();
  for (const auto& [name, service] : changes) {
    auto id = ids.find(name);
    if (service && id != ids.end() && !traffic_ids_.contains(name)) {
      if (adopted_maps) {
        (void)maps_.traffic.Delete(&id->second);
      }
      traffic_ids_.emplace(name, id->second);
    }
  }
}

void ExtNat::Forget(const std::vector<socklb::Gone>& gone) {
  if (absl::StatusOr<uint64_t> n = flows_.Forget(gone); !n.ok()) {
    LOG(WARNING) << "external NAT: ending UDP flows of removed backends: " << n.status();
  }
}

void ExtNat::SweepTraffic() {
  absl::flat_hash_set<uint32_t> live;
  for (const auto& [name, id] : services_.Ids()) {
    live.insert(id);
  }
  std::vector<uint32_t> stale;
  const std::vector<char> zero(maps_.traffic.value_size());
  (void)maps_.traffic.ForEach([&](const void* key, const void* value) {
    uint32_t id;
    std::memcpy(&id, key, sizeof(id));
    // Zero values are skipped: an array-backed map lists every index.
    if (!live.contains(id) && std::memcmp(value, zero.data(), zero.size()) != 0) {
      stale.push_back(id);
    }
  });
  for (uint32_t id : stale) {
    (void)maps_.traffic.Delete(&id);
  }
}

absl::Status ExtNat::Apply(const std::vector<Change>& changes) {
  Plan plan = Guard(changes);
  ListRemote(changes, plan);
  std::vector<socklb::Gone> gone;
  const absl::Status programmed = services_.Apply(plan.services, gone);
  UnlistRemote(plan);
  Settle(changes, plan, programmed.ok());
  Forget(gone);
  absl::Status result = plan.status;
  result.Update(programmed);
  return result;
}

absl::Status ExtNat::ApplyAll(std::map<std::string, Service> all) {
  std::vector<Change> changes;
  changes.reserve(all.size());
  std::set<std::string> gone_names;
  for (const std::string& name : ranges_.Names()) {
    gone_names.insert(name);
  }
  for (const auto& [name, id] : traffic_ids_) {
    gone_names.insert(name);
  }
  for (const std::string& name : gone_names) {
    if (!all.contains(name)) {
      changes.emplace_back(name, std::nullopt);
    }
  }
  for (auto& entry : all) {
    changes.emplace_back(entry.first, std::move(entry.second));  // a copy of 10,000 saved
  }
  Plan plan = Guard(changes);
  ListRemote(changes, plan);
  std::map<std::string, socklb::Service> lb;
  for (auto& [name, service] : plan.services) {
    if (service) {
      lb.emplace(name, std::move(*service));
    }
  }
  std::vector<socklb::Gone> gone;
  const absl::Status programmed = services_.ApplyAll(std::move(lb), gone);
  UnlistRemote(plan);
  Settle(changes, plan, programmed.ok());
  Forget(gone);
  // After ServiceMaps' own sweep: an earlier agent's frontend loses its guard only once it is
  // no longer served.
  if (programmed.ok() && !swept_) {
    swept_ = true;
    ranges_.Sweep();
    SweepTraffic();
    SweepRemote();
  }
  absl::Status result = plan.status;
  result.Update(programmed);
  return result;
}

absl::StatusOr<uint64_t> ExtNat::CollectFlows(absl::Duration now) { return flows_.Collect(now); }

void ExtNat::ForEachCounter(
    absl::FunctionRef<void(const std::string& name, const Counts&)> fn) const {
  // Each map in one pass, then joined by id. Best effort, as ServiceMaps::ForEachCounter: a
  // failed walk leaves this scrape's counters short.
  struct Traffic {
    uint64_t packets = 0;
    uint64_t bytes = 0;
  };
  absl::flat_hash_map<uint32_t, Traffic> traffic;
  (void)fastpath::ForEachPerCpu<sluice_nat_traffic>(
      maps_.traffic, [&](uint32_t id, const std::vector<sluice_nat_traffic>& per_cpu) {
        Traffic sum;
        for (const sluice_nat_traffic& t : per_cpu) {
          sum.packets += t.packets;
          sum.bytes += t.bytes;
        }
        if (sum.packets != 0 || sum.bytes != 0) {  // zero is what a missing entry reads as
          traffic[id] = sum;
        }
      });
  services_.ForEachCounter(
      [&](const std::string& name, uint32_t id, const socklb::ServiceMaps::Counts& c) {
        Counts out{.flows = c.translated, .range_drops = c.refused};
        if (auto it = traffic.find(id); it != traffic.end()) {
          out.packets = it->second.packets;
          out.bytes = it->second.bytes;
        }
        fn(name, out);
      });
}

std::map<std::string, ExtNat::Counts> ExtNat::Counters() const {
  std::map<std::string, Counts> out;
  ForEachCounter([&](const std::string& name, const Counts& c) {
    out.emplace_hint(out.end(), name, c);  // in order: no comparisons
  });
  return out;
}

std::map<std::string, uint64_t> ExtNat::Drops() const {
  std::map<std::string, uint64_t> out;
  std::vector<uint64_t> per_cpu(maps_.drops.value_size() / sizeof(uint64_t));
  for (const auto& [reason, label] : kReasons) {
    uint64_t& sum = out[label];
    if (maps_.drops.Lookup(&reason, per_cpu.data()).ok()) {
      for (uint64_t n : per_cpu) {
        sum += n;
      }
    }
  }
  return out;
}

std::map<std::string, std::vector<std::string>> ExtNat::Frontends() const {
  return services_.Frontends();
}

uint64_t ExtNat::flows() const { return flows_.size(); }

bool ExtNat::adopted() const {
  return services_.adopted() || (object_ != nullptr && object_->adopted_maps());
}

}  // namespace sluice::extnat
