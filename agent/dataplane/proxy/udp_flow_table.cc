// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/udp_flow_table.h"

namespace sluice::proxy {

UdpFlowTable::UdpFlowTable(size_t max_flows, size_t max_per_source, FdBudget* fds)
    : max_flows_(max_flows), max_per_source_(max_per_source), fds_(fds) {}

size_t UdpFlowTable::FlowsOf(const net::IpAddress& source) const {
  auto it = by_source_.find(source);
  return it == by_source_.end() ? 0 : it->second.size();
}

UdpFlowTable::Admission UdpFlowTable::Admit(const net::IpAddress& source) {
  if (auto own = by_source_.find(source);
      own != by_source_.end() && own->second.size() >= max_per_source_) {
    Evict(*own->second.front());  // this client's flow idle the longest makes room
  }
  while (lru_.size() >= max_flows_ && EvictOldest()) {
  }
  while (fds_ != nullptr && fds_->Full() && EvictOldest()) {
  }
  if (fds_ != nullptr && fds_->Full()) {
    return Admission::kNoDescriptor;
  }
  return lru_.size() < max_flows_ ? Admission::kAdmitted : Admission::kNoDescriptor;
}

void UdpFlowTable::Insert(Entry& flow) {
  flow.position_ = lru_.insert(lru_.end(), &flow);
  std::list<Entry*>& own = by_source_[flow.source()];
  flow.source_position_ = own.insert(own.end(), &flow);
  flow.linked_ = true;
  if (fds_ != nullptr) {
    fds_->Take(1);
  }
}

void UdpFlowTable::Touch(Entry& flow) {
  if (flow.linked_) {
    lru_.splice(lru_.end(), lru_, flow.position_);
    std::list<Entry*>& own = by_source_[flow.source()];
    own.splice(own.end(), own, flow.source_position_);
  }
}

void UdpFlowTable::Erase(Entry& flow) {
  if (!flow.linked_) {
    return;
  }
  lru_.erase(flow.position_);
  auto own = by_source_.find(flow.source());
  own->second.erase(flow.source_position_);
  if (own->second.empty()) {
    by_source_.erase(own);
  }
  flow.linked_ = false;
  if (fds_ != nullptr) {
    fds_->Give(1);
  }
}

bool UdpFlowTable::EvictOldest() {
  if (lru_.empty()) {
    return false;
  }
  Evict(*lru_.front());
  return true;
}

void UdpFlowTable::Evict(Entry& flow) {
  ++evictions_;
  Erase(flow);  // first: the owner may free it in Evict
  flow.Evict();
}

}  // namespace sluice::proxy
