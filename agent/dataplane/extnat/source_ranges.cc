// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/extnat/source_ranges.h"

#include <netinet/in.h>

#include <cstring>

#include "lib/base/log.h"
#include "lib/base/status.h"

#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::extnat {

static_assert(sizeof(sluice_nat_range) == 40, "bpf_abi.h: struct sluice_nat_range");

namespace {

// Bits of the key before the source address: the frontend.
constexpr uint32_t kFrontBits = 8 * sizeof(sluice_lb_key);

std::string Bytes(const sluice_nat_range& key) {
  return std::string(reinterpret_cast<const char*>(&key), sizeof(key));
}

sluice_nat_range Guard(const socklb::Frontend& f) {
  const sluice_lb_addr a = socklb::LbAddr(f.address);
  sluice_nat_range key{};
  key.prefixlen = kFrontBits;
  std::memcpy(key.front.addr, a.addr, sizeof(key.front.addr));
  key.front.port = a.port;
  key.front.proto = f.udp ? IPPROTO_UDP : IPPROTO_TCP;
  return key;
}

}  // namespace

SourceRanges::SourceRanges(fastpath::BpfMap& trie) : trie_(trie) {
  SLUICE_CHECK(trie.key_size() == sizeof(sluice_nat_range) && trie.value_size() == 1)
      << trie.name();
}

SourceRanges::Entries SourceRanges::EntriesOf(const Guards& guards) {
  Entries out;
  for (const auto& [front, ranges] : guards) {
    sluice_nat_range key = Guard(front);
    // A range that covers every source (::/0) has the guard's own key: it wins.
    out.emplace(Bytes(key), 0);
    for (const net::Cidr& range : ranges) {
      // A range of the other family can never match this frontend's packets.
      if (range.base().is_v4() != front.address.ip().is_v4()) {
        continue;
      }
      const sluice_lb_addr a = socklb::LbAddr(net::SocketAddress(range.Network().base(), 0));
      std::memcpy(key.addr, a.addr, sizeof(key.addr));
      key.prefixlen = kFrontBits + (range.base().is_v4() ? 96 : 0) + range.prefix();
      out[Bytes(key)] = 1;
    }
  }
  return out;
}

absl::Status SourceRanges::Add(const std::string& name, const Guards& guards) {
  const Entries want = EntriesOf(guards);
  if (want.empty()) {
    return absl::OkStatus();
  }
  Entries& have = programmed_[name];
  // The allowed ranges before the guard: a new frontend is not served yet, and one already
  // guarded keeps its guard.
  for (const uint8_t pass : {1, 0}) {
    for (const auto& [key, allow] : want) {
      auto it = have.find(key);
      if (allow != pass || (it != have.end() && it->second == allow)) {
        continue;
      }
      RETURN_IF_ERROR(trie_.Update(key.data(), &allow, BPF_ANY));
      if (it == have.end()) {
        ++refs_[key];
        have.emplace(key, allow);
      } else {
        it->second = allow;
      }
    }
  }
  return absl::OkStatus();
}

void SourceRanges::Trim(const std::string& name, const Guards& guards) {
  auto it = programmed_.find(name);
  if (it == programmed_.end()) {
    return;
  }
  const Entries want = EntriesOf(guards);
  for (auto e = it->second.begin(); e != it->second.end();) {
    if (want.contains(e->first)) {
      ++e;
      continue;
    }
    if (--refs_[e->first] == 0) {
      refs_.erase(e->first);
      if (absl::Status st = trie_.Delete(e->first.data()); !st.ok() && !absl::IsNotFound(st)) {
        LOG(WARNING) << "external NAT: removing a source range of " << name << ": " << st;
      }
    }
    e = it->second.erase(e);
  }
  if (it->second.empty()) {
    programmed_.erase(it);
  }
}

void SourceRanges::Sweep() {
  std::vector<Key> stale;
  (void)trie_.ForEach([&](const void* key, const void*) {
    Key k(static_cast<const char*>(key), sizeof(sluice_nat_range));
    if (!refs_.contains(k)) {
      stale.push_back(std::move(k));
    }
  });
  int removed = 0;
  for (const Key& k : stale) {
    removed += trie_.Delete(k.data()).ok();
  }
  if (removed > 0) {
    LOG(INFO) << "external NAT: removed " << removed << " source ranges an earlier agent left";
  }
}

std::vector<std::string> SourceRanges::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, entries] : programmed_) {
    out.push_back(name);
  }
  return out;
}

}  // namespace sluice::extnat
