// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/extnat/flow_table.h"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::extnat {

static_assert(sizeof(sluice_nat_tuple) == 40, "bpf_abi.h: struct sluice_nat_tuple");
static_assert(sizeof(sluice_nat_ct) == 56, "bpf_abi.h: struct sluice_nat_ct");

namespace {

using Entry = std::pair<sluice_nat_tuple, sluice_nat_ct>;
using CtMap = fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct>;

// A conntrack key hashed as its bytes (no allocation: a full table is 262,144 of them).
struct Key {
  sluice_nat_tuple t;
  friend bool operator==(const Key& a, const Key& b) {
    return std::memcmp(&a.t, &b.t, sizeof(a.t)) == 0;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Key& k) {
    return H::combine_contiguous(std::move(h), reinterpret_cast<const unsigned char*>(&k.t),
                                 sizeof(k.t));
  }
};

bool IsReply(const sluice_nat_ct& v) { return (v.flags & SLUICE_NAT_CT_REPLY) != 0; }

// The key of the other direction's entry of `e`'s flow. Forward (client -> frontend) with `to`
// the backend pairs with reply (backend -> client) with `to` the frontend; an SNATed flow's
// reply is (backend -> SNAT address), which both entries hold in `nat`.
sluice_nat_tuple Partner(const Entry& e) {
  const auto& [key, ct] = e;
  const bool snat = (ct.flags & SLUICE_NAT_CT_SNAT) != 0;
  sluice_nat_tuple p{};
  p.proto = key.proto;
  if (IsReply(ct)) {
    std::memcpy(p.saddr, snat ? ct.nat.addr : key.daddr, sizeof(p.saddr));
    p.sport = snat ? ct.nat.port : key.dport;
    std::memcpy(p.daddr, ct.to.addr, sizeof(p.daddr));
    p.dport = ct.to.port;
  } else {
    std::memcpy(p.saddr, ct.to.addr, sizeof(p.saddr));
    p.sport = ct.to.port;
    std::memcpy(p.daddr, snat ? ct.nat.addr : key.saddr, sizeof(p.daddr));
    p.dport = snat ? ct.nat.port : key.sport;
  }
  return p;
}

// Whether `b` is the other direction of `a`'s flow (and `a` of `b`'s).
bool Paired(const Entry& a, const Entry& b) {
  return IsReply(a.second) != IsReply(b.second) && Key{Partner(a)} == Key{b.first} &&
         Key{Partner(b)} == Key{a.first};
}

absl::StatusOr<std::vector<Entry>> Walk(const fastpath::BpfMap& map) {
  std::vector<Entry> out;
  RETURN_IF_ERROR(map.ForEach([&](const void* k, const void* v) {
    Entry& e = out.emplace_back();
    std::memcpy(&e.first, k, sizeof(e.first));
    std::memcpy(&e.second, v, sizeof(e.second));
  }));
  return out;
}

}  // namespace

FlowTable::FlowTable(fastpath::BpfMap& map, const Ages& ages) : map_(map), ages_(ages) {
  (void)CtMap(map);  // checks the sizes
}

absl::StatusOr<uint64_t> FlowTable::Collect(absl::Duration now) {
  ASSIGN_OR_RETURN(std::vector<Entry> entries, Walk(map_));
  absl::flat_hash_map<Key, size_t> index;
  index.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    index.emplace(Key{entries[i].first}, i);
  }
  // A flow is idle for as long as both of its entries are; one without its partner (the
  // program writes them one after the other) ages alone.
  auto expired = [&](const std::vector<Entry>& flow) {
    uint64_t last_ns = 0;
    uint32_t flags = 0;
    for (const Entry& e : flow) {
      last_ns = std::max<uint64_t>(last_ns, e.second.last_ns);
      flags |= e.second.flags;
    }
    absl::Duration age = ages_.tcp_established;
    switch (sluice_nat_age_of(flow[0].first.proto, flags)) {
      case SLUICE_NAT_AGE_UDP:
        age = ages_.udp;
        break;
      case SLUICE_NAT_AGE_TCP_CLOSED:
        age = ages_.tcp_closed;
        break;
      case SLUICE_NAT_AGE_TCP_CLOSE_WAIT:
        age = ages_.tcp_close_wait;
        break;
      case SLUICE_NAT_AGE_TCP_ESTABLISHED:
        break;
    }
    return now - absl::Nanoseconds(static_cast<int64_t>(last_ns)) > age;
  };
  CtMap ct(map_);
  std::vector<bool> seen(entries.size());
  uint64_t removed = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (seen[i]) {
      continue;
    }
    seen[i] = true;
    std::vector<Entry> flow{entries[i]};
    if (auto it = index.find(Key{Partner(entries[i])});
        it != index.end() && !seen[it->second] && Paired(entries[i], entries[it->second])) {
      seen[it->second] = true;
      flow.push_back(entries[it->second]);
    }
    if (!expired(flow)) {
      continue;
    }
    // Read again: a packet since the walk keeps the flow.
    std::vector<Entry> now_flow;
    for (const Entry& e : flow) {
      if (absl::StatusOr<sluice_nat_ct> v = ct.Lookup(e.first); v.ok()) {
        now_flow.emplace_back(e.first, *v);
      }
    }
    if (now_flow.empty() || !expired(now_flow)) {
      continue;
    }
    // The reply entry first: a client packet in between still finds its forward entry, and
    // once that is gone the next one starts a new flow with both entries new.
    std::sort(now_flow.begin(), now_flow.end(),
              [](const Entry& a, const Entry& b) { return IsReply(a.second) > IsReply(b.second); });
    for (const Entry& e : now_flow) {
      removed += ct.Delete(e.first).ok();
    }
  }
  const uint64_t left = entries.size() - std::min<uint64_t>(removed, entries.size());
  size_.store(left, std::memory_order_relaxed);
  return left;
}

absl::StatusOr<uint64_t> FlowTable::Forget(const std::vector<socklb::Gone>& gone) {
  if (gone.empty()) {
    return 0;
  }
  // (frontend, backend) as a forward entry holds them: its destination and its `to`.
  auto pair_key = [](const uint8_t* front, uint16_t front_port, const sluice_lb_addr& backend) {
    std::string k(reinterpret_cast<const char*>(front), 16);
    k.append(reinterpret_cast<const char*>(&front_port), sizeof(front_port));
    k.append(reinterpret_cast<const char*>(backend.addr), sizeof(backend.addr));
    k.append(reinterpret_cast<const char*>(&backend.port), sizeof(backend.port));
    return k;
  };
  absl::flat_hash_set<std::string> ended;
  for (const socklb::Gone& g : gone) {
    const sluice_lb_addr front = socklb::LbAddr(g.front);
    ended.insert(pair_key(front.addr, front.port, socklb::LbAddr(g.backend)));
  }
  ASSIGN_OR_RETURN(std::vector<Entry> entries, Walk(map_));
  CtMap ct(map_);
  uint64_t flows = 0;
  for (const Entry& e : entries) {
    if (IsReply(e.second) || e.first.proto != IPPROTO_UDP ||
        !ended.contains(pair_key(e.first.daddr, e.first.dport, e.second.to))) {
      continue;
    }
    (void)ct.Delete(Partner(e));  // the reply entry first, as in Collect
    flows += ct.Delete(e.first).ok();
  }
  return flows;
}

}  // namespace sluice::extnat
