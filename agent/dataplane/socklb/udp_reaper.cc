// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/udp_reaper.h"

#include <algorithm>

#include "agent/dataplane/socklb/socket_walk.h"
#include "bpf/include/sluice/bpf_abi.h"

namespace sluice::socklb {

static_assert(sizeof(sluice_lb_gone) == 40, "bpf_abi.h: struct sluice_lb_gone");

UdpReaper::UdpReaper(fastpath::LinkPtr iterator, fastpath::BpfMap& gone, const __u64& reaped)
    : iterator_(std::move(iterator)), gone_(gone), reaped_(reaped) {}

absl::Status UdpReaper::Reap(const std::vector<Gone>& gone) {
  absl::Status result;
  for (size_t at = 0; at < gone.size(); at += kBatch) {
    result.Update(
        ReapBatch(std::span(gone).subspan(at, std::min<size_t>(kBatch, gone.size() - at))));
  }
  return result;
}

absl::Status UdpReaper::ReapBatch(std::span<const Gone> gone) {
  fastpath::TypedMap<sluice_lb_gone, uint8_t> map(gone_);
  std::vector<sluice_lb_gone> keys;
  absl::Status result;
  for (const auto& g : gone) {
    const sluice_lb_gone key{.front = LbAddr(g.front), .backend = LbAddr(g.backend)};
    if (absl::Status st = map.Update(key, 1); !st.ok()) {
      result = st;  // out of memory: these stay open
      break;
    }
    keys.push_back(key);
  }
  result.Update(WalkSocketsEverywhere(iterator_.get()));
  for (const auto& k : keys) {
    (void)map.Delete(k);
  }
  return result;
}

uint64_t UdpReaper::reaped() const {
  return __atomic_load_n(&reaped_, __ATOMIC_RELAXED);  // the program's counter
}

}  // namespace sluice::socklb
