// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/review_queue.h"

namespace sluice::tunnel::server {

ReviewQueue::Added ReviewQueue::Add(const std::string& peer, QueuedReview&& review) {
  if (total_ >= max_total_) {
    return Added::kFull;
  }
  std::deque<QueuedReview>& q = by_peer_[peer];
  if (q.size() >= max_per_peer_) {
    return Added::kPeerFull;
  }
  if (q.empty()) {
    turns_.push_back(peer);
  }
  q.push_back(std::move(review));
  ++total_;
  return Added::kQueued;
}

std::optional<QueuedReview> ReviewQueue::Next() {
  if (turns_.empty()) {
    return std::nullopt;
  }
  const std::string peer = std::move(turns_.front());
  turns_.pop_front();
  auto it = by_peer_.find(peer);
  QueuedReview next = std::move(it->second.front());
  it->second.pop_front();
  --total_;
  if (it->second.empty()) {
    by_peer_.erase(it);
  } else {
    turns_.push_back(peer);
  }
  return next;
}

std::vector<QueuedReview> ReviewQueue::TakeAll() {
  std::vector<QueuedReview> out;
  while (std::optional<QueuedReview> r = Next()) {
    out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace sluice::tunnel::server
