// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/service_maps.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::socklb {

static_assert(sizeof(sluice_lb_key) == 20, "bpf_abi.h: struct sluice_lb_key");
static_assert(sizeof(sluice_lb_addr) == 20, "bpf_abi.h: struct sluice_lb_addr");
static_assert(sizeof(sluice_lb_svc) == 24, "bpf_abi.h: struct sluice_lb_svc");
static_assert(sizeof(sluice_lb_member) == 24, "bpf_abi.h: struct sluice_lb_member");
static_assert(sizeof(sluice_lb_stats) == 16, "bpf_abi.h: struct sluice_lb_stats");

namespace {

using SvcMap = fastpath::TypedMap<sluice_lb_key, sluice_lb_svc>;
using SlotMap = fastpath::TypedMap<sluice_lb_slot, sluice_lb_addr>;
using MemberMap = fastpath::TypedMap<sluice_lb_member, uint8_t>;

sluice_lb_key ToKey(const Frontend& f) {
  const sluice_lb_addr a = LbAddr(f.address);
  sluice_lb_key key{};
  std::memcpy(key.addr, a.addr, sizeof(key.addr));
  key.port = a.port;
  key.proto = f.udp ? IPPROTO_UDP : IPPROTO_TCP;
  return key;
}

std::vector<uint32_t> StatsIds(const fastpath::BpfMap& stats) {
  std::vector<uint32_t> ids;
  (void)stats.ForEach([&](const void* key, const void*) {
    uint32_t id;
    std::memcpy(&id, key, sizeof(id));
    ids.push_back(id);
  });
  return ids;
}

std::string FrontendName(const Frontend& f) {
  return absl::StrCat(f.udp ? "udp/" : "tcp/", f.address.ToString());
}

// Appends the UDP frontends of `had` paired with its backends that `now` (null: removed) lacks.
// Connected UDP sockets aimed at a backend that left never connect again by themselves; TCP
// connections are left to finish, as on the proxy path.
void AppendGone(const Service& had, const Service* now, std::vector<Gone>& gone) {
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

}  // namespace

sluice_lb_addr LbAddr(const net::SocketAddress& a) {
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

ServiceMaps::ServiceMaps(Maps maps)
    : maps_(maps), cpus_(std::max<size_t>(maps.stats.value_size() / sizeof(sluice_lb_stats), 1)) {
  SLUICE_CHECK(maps.stats.key_size() == sizeof(uint32_t) &&
               maps.stats.value_size() % sizeof(sluice_lb_stats) == 0);
  Scan();
}

void ServiceMaps::Scan() {
  uint32_t max_id = 0;
  uint32_t max_set = 0;
  for (const auto& [key, v] : SvcMap(maps_.svc).Entries()) {
    max_id = std::max(max_id, v.id);
    max_set = std::max(max_set, v.set);
    adopted_ = true;
  }
  for (const auto& [slot, be] : SlotMap(maps_.slot).Entries()) {
    max_set = std::max(max_set, slot.set);
  }
  for (uint32_t id : StatsIds(maps_.stats)) {
    max_id = std::max(max_id, id);
  }
  next_id_ = max_id + 1;
  next_set_ = max_set + 1;
}

void ServiceMaps::Sweep() {
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
  SvcMap svc(maps_.svc);
  for (const auto& [key, v] : svc.Entries()) {
    if (!live_ids.contains(v.id)) {
      removed += svc.Delete(key).ok();
    }
  }
  SlotMap slots(maps_.slot);
  for (const auto& [slot, be] : slots.Entries()) {
    if (!live_sets.contains(slot.set)) {
      removed += slots.Delete(slot).ok();
    }
  }
  MemberMap members(maps_.member);
  for (const auto& [m, one] : members.Entries()) {
    if (!live_ids.contains(m.id)) {
      removed += members.Delete(m).ok();
    }
  }
  for (uint32_t id : StatsIds(maps_.stats)) {
    if (!live_ids.contains(id)) {
      removed += maps_.stats.Delete(&id).ok();
    }
  }
  if (removed > 0) {
    LOG(INFO) << "socket LB: removed " << removed << " map entries an earlier agent left";
  }
}

absl::Status ServiceMaps::WriteSet(uint32_t set, const std::vector<net::SocketAddress>& backends) {
  SlotMap slots(maps_.slot);
  for (uint32_t i = 0; i < backends.size(); ++i) {
    if (absl::Status st = slots.Update({.set = set, .index = i}, LbAddr(backends[i])); !st.ok()) {
      FreeSet(set, i);
      return st;
    }
  }
  return absl::OkStatus();
}

void ServiceMaps::FreeSet(uint32_t set, uint32_t count) {
  SlotMap slots(maps_.slot);
  for (uint32_t i = 0; i < count; ++i) {
    (void)slots.Delete({.set = set, .index = i});
  }
}

absl::Status ServiceMaps::SetMembers(uint32_t id, const Service* old_svc, const Service* new_svc) {
  auto members = [](const Service* s) {
    std::set<net::SocketAddress> out;
    if (s != nullptr && s->affinity > absl::ZeroDuration()) {
      out.insert(s->backends.begin(), s->backends.end());
    }
    return out;
  };
  const std::set<net::SocketAddress> had = members(old_svc);
  const std::set<net::SocketAddress> want = members(new_svc);
  MemberMap map(maps_.member);
  for (const auto& b : want) {
    if (!had.contains(b)) {
      RETURN_IF_ERROR(map.Update({.id = id, .backend = LbAddr(b)}, 1));
    }
  }
  for (const auto& b : had) {
    if (!want.contains(b)) {
      (void)map.Delete({.id = id, .backend = LbAddr(b)});
    }
  }
  return absl::OkStatus();
}

absl::Status ServiceMaps::Apply(const std::vector<Change>& changes, std::vector<Gone>& gone) {
  // Programs that read a retired set's service value have long finished (they run under RCU
  // and a sync is at least a syscall round trip later); the program also re-reads the service
  // when a slot is missing.
  for (const Retired& r : retired_) {
    FreeSet(r.set, r.count);
  }
  retired_.clear();
  absl::Status result;
  for (const auto& [name, service] : changes) {
    result.Update(service ? Upsert(name, *service, gone) : Remove(name, gone));
  }
  return result;
}

absl::Status ServiceMaps::ApplyAll(const std::map<std::string, Service>& all,
                                   std::vector<Gone>& gone) {
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
  absl::Status result = Apply(changes, gone);
  if (result.ok() && adopted_ && !swept_) {
    swept_ = true;
    Sweep();
  }
  return result;
}

absl::Status ServiceMaps::Upsert(const std::string& name, const Service& service,
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
    // Counters are best effort: a service whose entry could not be made works uncounted.
    const std::vector<sluice_lb_stats> zero(cpus_);
    (void)maps_.stats.Update(&next.id, zero.data(), BPF_ANY);
  }
  const bool new_set = !old || old->service.backends != service.backends;
  absl::Status st;
  if (new_set) {
    next.set = next_set_++;
    st = WriteSet(next.set, service.backends);
  }
  if (st.ok()) {
    st = SetMembers(next.id, old ? &old->service : nullptr, &service);
    if (!st.ok() && new_set) {
      FreeSet(next.set, static_cast<uint32_t>(service.backends.size()));
    }
  }
  if (!st.ok()) {
    if (!old) {
      (void)maps_.stats.Delete(&next.id);  // a new service's counters: not programmed after all
    }
    return st;
  }
  const sluice_lb_svc value{
      .id = next.id,
      .set = next.set,
      .count = static_cast<uint32_t>(service.backends.size()),
      .affinity = static_cast<uint32_t>(absl::ToInt64Seconds(service.affinity)),
      .flags = service.random ? static_cast<uint32_t>(SLUICE_LB_RANDOM) : 0u,
      .next = 0};
  SvcMap svc(maps_.svc);
  absl::Status result;
  for (const Frontend& f : service.frontends) {
    result.Update(svc.Update(ToKey(f), value));
  }
  if (old) {
    for (const Frontend& f : old->service.frontends) {
      if (std::find(service.frontends.begin(), service.frontends.end(), f) ==
          service.frontends.end()) {
        (void)svc.Delete(ToKey(f));
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

absl::Status ServiceMaps::Remove(const std::string& name, std::vector<Gone>& gone) {
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
  SvcMap svc(maps_.svc);
  for (const Frontend& f : old.service.frontends) {
    (void)svc.Delete(ToKey(f));
  }
  retired_.push_back({old.set, static_cast<uint32_t>(old.service.backends.size())});
  AppendGone(old.service, nullptr, gone);
  RETURN_IF_ERROR(SetMembers(old.id, &old.service, nullptr));
  (void)maps_.stats.Delete(&old.id);
  return absl::OkStatus();
}

std::map<std::string, ServiceMaps::Counts> ServiceMaps::Counters() const {
  // Names under the lock, counters after it: a scrape must not hold up Upsert.
  absl::flat_hash_map<uint32_t, Counts*> by_id;
  std::map<std::string, Counts> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, p] : programmed_) {
      by_id[p.id] = &out.emplace(name, Counts{}).first->second;
    }
  }
  // Best effort: a failed walk leaves this scrape's counters short.
  (void)maps_.stats.ForEach([&](const void* key, const void* value) {
    uint32_t id;
    std::memcpy(&id, key, sizeof(id));
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return;  // an id being added or removed right now
    }
    for (size_t cpu = 0; cpu < cpus_; ++cpu) {
      sluice_lb_stats s;
      std::memcpy(&s, static_cast<const char*>(value) + cpu * sizeof(s), sizeof(s));
      it->second->translated += s.translated;
      it->second->refused += s.refused;
    }
  });
  return out;
}

std::map<std::string, std::vector<std::string>> ServiceMaps::Frontends() const {
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

std::map<std::string, uint32_t> ServiceMaps::Ids() const {
  std::map<std::string, uint32_t> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, p] : programmed_) {
    out.emplace(name, p.id);
  }
  return out;
}

}  // namespace sluice::socklb
