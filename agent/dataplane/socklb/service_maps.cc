// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/service_maps.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
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

// `s`'s backends with affinity membership entries: all of them when it has affinity; none for
// null.
std::set<net::SocketAddress> Members(const Service* s) {
  std::set<net::SocketAddress> out;
  if (s != nullptr && s->affinity > absl::ZeroDuration()) {
    out.insert(s->backends.begin(), s->backends.end());
  }
  return out;
}

std::string KeyBytes(const sluice_lb_key& key) {
  return std::string(reinterpret_cast<const char*>(&key), sizeof(key));
}

// Entries for one map, each tagged with the step it belongs to (a step's entries adjacent),
// written in batches: ~120,000 writes at 10,000 services / 100,000 endpoints.
class EntryBatch {
 public:
  explicit EntryBatch(const fastpath::BpfMap& map)
      : key_size_(map.key_size()), value_size_(map.value_size()) {}

  void Reserve(size_t n) {
    keys_.reserve(n * key_size_);
    values_.reserve(n * value_size_);
    steps_.reserve(n);
  }
  template <typename K, typename V>
  void Add(size_t step, const K& key, const V& value) {
    SLUICE_CHECK(sizeof(K) == key_size_ && sizeof(V) == value_size_);
    AddBytes(step, &key, &value);
  }
  void AddBytes(size_t step, const void* key, const void* value) {
    keys_.insert(keys_.end(), static_cast<const char*>(key),
                 static_cast<const char*>(key) + key_size_);
    values_.insert(values_.end(), static_cast<const char*>(value),
                   static_cast<const char*>(value) + value_size_);
    steps_.push_back(step);
  }
  // Writes the entries in order. An entry that fails is reported to `failed` (its step, why),
  // which returns whether to skip that step's remaining entries.
  void Write(fastpath::BpfMap& map,
             absl::FunctionRef<bool(size_t step, const absl::Status&)> failed) const {
    const size_t n = steps_.size();
    for (size_t i = 0; i < n;) {
      const fastpath::BpfMap::BatchResult r =
          map.UpdateBatch(keys_.data() + i * key_size_, values_.data() + i * value_size_,
                          static_cast<uint32_t>(n - i), BPF_ANY);
      i += r.written;
      if (r.status.ok()) {
        break;
      }
      const size_t step = steps_[i++];
      if (failed(step, r.status)) {
        while (i < n && steps_[i] == step) {
          ++i;
        }
      }
    }
  }

 private:
  const size_t key_size_;
  const size_t value_size_;
  std::vector<char> keys_;
  std::vector<char> values_;
  std::vector<size_t> steps_;
};

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

ServiceMaps::ServiceMaps(Maps maps) : maps_(maps) {
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

void ServiceMaps::FreeSet(uint32_t set, uint32_t count) {
  SlotMap slots(maps_.slot);
  for (uint32_t i = 0; i < count; ++i) {
    (void)slots.Delete({.set = set, .index = i});
  }
}

absl::Status ServiceMaps::Apply(const std::vector<Change>& changes, std::vector<Gone>& gone) {
  // Programs that read a retired set's service value have long finished (they run under RCU
  // and a sync is at least a syscall round trip later); the program also re-reads the service
  // when a slot is missing.
  for (const Retired& r : retired_) {
    FreeSet(r.set, r.count);
  }
  retired_.clear();
  // A name repeated in `changes` starts another round, so that its changes apply in order.
  absl::Status result;
  std::set<std::string_view> names;
  size_t begin = 0;
  for (size_t i = 0; i <= changes.size(); ++i) {
    if (i == changes.size() || !names.insert(changes[i].first).second) {
      result.Update(ApplyDistinct(changes.data() + begin, i - begin, gone));
      names = {changes.size() == i ? std::string_view() : std::string_view(changes[i].first)};
      begin = i;
    }
  }
  return result;
}

absl::Status ServiceMaps::ApplyAll(std::map<std::string, Service> all, std::vector<Gone>& gone) {
  std::vector<Change> changes;
  changes.reserve(all.size());
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, p] : programmed_) {
      if (!all.contains(name)) {
        changes.emplace_back(name, std::nullopt);
      }
    }
  }
  for (auto& entry : all) {
    changes.emplace_back(entry.first, std::move(entry.second));
  }
  absl::Status result = Apply(changes, gone);
  if (result.ok() && adopted_ && !swept_) {
    swept_ = true;
    Sweep();
  }
  return result;
}

absl::Status ServiceMaps::ApplyDistinct(const Change* changes, size_t count,
                                        std::vector<Gone>& gone) {
  std::vector<Step> steps = Plan(changes, count);
  if (steps.empty()) {
    return absl::OkStatus();
  }
  WriteSets(steps);
  WriteMembers(steps);
  std::set<std::string> written;
  absl::Status result = WriteFrontends(steps, written);
  Retire(steps, written, gone);
  absl::MutexLock lock(&mu_);
  for (Step& s : steps) {
    if (!s.status.ok()) {
      result.Update(s.status);
    } else if (s.next) {
      // A service port keeps its id while programmed: most changes leave ids_ alone.
      if (!s.old || s.old->id != s.next->id) {
        ids_.insert_or_assign(s.name, s.next->id);
      }
      programmed_[s.name] = std::move(*s.next);
    } else {
      ids_.erase(s.name);
      programmed_.erase(s.name);
    }
  }
  return result;
}

std::vector<ServiceMaps::Step> ServiceMaps::Plan(const Change* changes, size_t count) {
  std::vector<Step> steps;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, service] : absl::MakeSpan(changes, count)) {
    Step s{.name = name};
    if (auto it = programmed_.find(name); it != programmed_.end()) {
      if (service && it->second.service == *service) {
        continue;  // programmed as it is
      }
      s.old = it->second;
    } else if (!service) {
      continue;  // removing what is not programmed
    }
    if (service) {
      s.new_set = !s.old || s.old->service.backends != service->backends;
      s.next = Programmed{.id = s.old ? s.old->id : next_id_++,
                          .set = s.new_set ? next_set_++ : s.old->set,
                          .service = *service};
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

void ServiceMaps::WriteSets(std::vector<Step>& steps) {
  EntryBatch batch(maps_.slot);
  size_t slots = 0;
  for (const Step& s : steps) {
    slots += s.new_set ? s.next->service.backends.size() : 0;
  }
  batch.Reserve(slots);  // 100,000 slots at a cold start: no regrowth of 2 MiB buffers
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].new_set) {
      continue;
    }
    const Programmed& next = *steps[i].next;
    for (uint32_t j = 0; j < next.service.backends.size(); ++j) {
      batch.Add(i, sluice_lb_slot{.set = next.set, .index = j}, LbAddr(next.service.backends[j]));
    }
  }
  batch.Write(maps_.slot, [&](size_t i, const absl::Status& st) {
    Step& s = steps[i];
    s.status = st;
    FreeSet(s.next->set, static_cast<uint32_t>(s.next->service.backends.size()));
    return true;  // never points at a partial set
  });
}

void ServiceMaps::WriteMembers(std::vector<Step>& steps) {
  // Of each step with a next service: its members, and those it had.
  auto members = [&](const Step& s) {
    return std::pair(Members(&s.next->service), Members(s.old ? &s.old->service : nullptr));
  };
  EntryBatch adds(maps_.member);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].status.ok() || !steps[i].next) {
      continue;  // a removed service's membership goes after its frontends (Retire)
    }
    const auto [want, had] = members(steps[i]);
    for (const auto& b : want) {
      if (!had.contains(b)) {
        adds.Add(i, sluice_lb_member{.id = steps[i].next->id, .backend = LbAddr(b)}, uint8_t{1});
      }
    }
  }
  MemberMap map(maps_.member);
  adds.Write(maps_.member, [&](size_t i, const absl::Status& st) {
    Step& s = steps[i];
    s.status = st;
    const auto [want, had] = members(s);
    for (const auto& b : want) {  // what it added before the failure
      if (!had.contains(b)) {
        (void)map.Delete({.id = s.next->id, .backend = LbAddr(b)});
      }
    }
    if (s.new_set) {
      FreeSet(s.next->set, static_cast<uint32_t>(s.next->service.backends.size()));
    }
    return true;
  });
  for (const Step& s : steps) {
    if (!s.status.ok() || !s.next) {
      continue;
    }
    const auto [want, had] = members(s);
    for (const auto& b : had) {
      if (!want.contains(b)) {
        (void)map.Delete({.id = s.next->id, .backend = LbAddr(b)});
      }
    }
  }
}

absl::Status ServiceMaps::WriteFrontends(const std::vector<Step>& steps,
                                         std::set<std::string>& written) {
  EntryBatch batch(maps_.svc);
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (!s.status.ok() || !s.next) {
      continue;
    }
    const Service& service = s.next->service;
    const sluice_lb_svc value{
        .id = s.next->id,
        .set = s.next->set,
        .count = static_cast<uint32_t>(service.backends.size()),
        .affinity = static_cast<uint32_t>(absl::ToInt64Seconds(service.affinity)),
        .flags = service.random ? static_cast<uint32_t>(SLUICE_LB_RANDOM) : 0u,
        .next = 0};
    for (const Frontend& f : service.frontends) {
      const sluice_lb_key key = ToKey(f);
      batch.Add(i, key, value);
      written.insert(KeyBytes(key));
    }
  }
  absl::Status result;
  batch.Write(maps_.svc, [&](size_t, const absl::Status& st) {
    result.Update(st);
    return false;  // the service's other frontends still apply
  });
  return result;
}

void ServiceMaps::Retire(const std::vector<Step>& steps, const std::set<std::string>& written,
                         std::vector<Gone>& gone) {
  SvcMap svc(maps_.svc);
  for (const Step& s : steps) {
    if (!s.status.ok() || !s.old) {
      continue;
    }
    for (const Frontend& f : s.old->service.frontends) {
      const sluice_lb_key key = ToKey(f);
      if (!written.contains(KeyBytes(key))) {  // not taken over by this or another service
        (void)svc.Delete(key);
      }
    }
    if (s.new_set || !s.next) {
      retired_.push_back({s.old->set, static_cast<uint32_t>(s.old->service.backends.size())});
    }
    AppendGone(s.old->service, s.next ? &s.next->service : nullptr, gone);
    if (!s.next) {
      MemberMap members(maps_.member);
      for (const auto& b : Members(&s.old->service)) {
        (void)members.Delete({.id = s.old->id, .backend = LbAddr(b)});
      }
      (void)maps_.stats.Delete(&s.old->id);
    }
  }
}

void ServiceMaps::ForEachCounter(
    absl::FunctionRef<void(const std::string& name, uint32_t id, const Counts&)> fn) const {
  const IdMap ids = Ids();
  absl::flat_hash_map<uint32_t, Counts> by_id;
  (void)fastpath::ForEachPerCpu<sluice_lb_stats>(
      maps_.stats, [&](uint32_t id, const std::vector<sluice_lb_stats>& per_cpu) {
        Counts sum;
        for (const sluice_lb_stats& s : per_cpu) {
          sum.translated += s.translated;
          sum.refused += s.refused;
        }
        if (sum.translated != 0 || sum.refused != 0) {  // zero is what a missing entry reads as
          by_id[id] = sum;
        }
      });
  static constexpr Counts kNone;
  for (const auto& [name, id] : ids) {
    auto it = by_id.find(id);
    fn(name, id, it == by_id.end() ? kNone : it->second);
  }
}

std::map<std::string, ServiceMaps::Counts> ServiceMaps::Counters() const {
  std::map<std::string, Counts> out;
  ForEachCounter([&](const std::string& name, uint32_t, const Counts& c) {
    out.emplace_hint(out.end(), name, c);  // in order: no comparisons
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

ServiceMaps::IdMap ServiceMaps::Ids() const {
  absl::MutexLock lock(&mu_);
  return ids_;
}

}  // namespace sluice::socklb
