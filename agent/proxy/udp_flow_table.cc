// SPDX-License-Identifier: Apache-2.0
#include "agent/proxy/udp_flow_table.h"

namespace sluice::proxy {

UdpFlowTable::UdpFlowTable(size_t max_flows, size_t max_per_source, FdBudget* fds)
    : max_flows_(max_flows), fds_(fds), sources_(max_per_source) {}

UdpFlowTable::Admission UdpFlowTable::Admit(const net::IpAddress& source) {
  if (sources_.Count(source) >= sources_.cap()) {
    return Admission::kSourceLimit;
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
  (void)sources_.TryAdd(flow.source());  // Admit checked the cap
  flow.position_ = lru_.insert(lru_.end(), &flow);
  flow.linked_ = true;
  if (fds_ != nullptr) {
    fds_->Take(1);
  }
}

void UdpFlowTable::Touch(Entry& flow) {
  if (flow.linked_) {
    lru_.splice(lru_.end(), lru_, flow.position_);
  }
}

void UdpFlowTable::Erase(Entry& flow) {
  if (!flow.linked_) {
    return;
  }
  lru_.erase(flow.position_);
  flow.linked_ = false;
  sources_.Remove(flow.source());
  if (fds_ != nullptr) {
    fds_->Give(1);
  }
}

bool UdpFlowTable::EvictOldest() {
  if (lru_.empty()) {
    return false;
  }
  Entry* oldest = lru_.front();
  ++evictions_;
  Erase(*oldest);  // first: the owner may free it in Evict
  oldest->Evict();
  return true;
}

}  // namespace sluice::proxy
