// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "tunnel/server/token_check.h"

namespace sluice::tunnel::server {

struct QueuedReview {
  std::string token;
  TokenDigest digest{};
  absl::Time expiry = absl::InfiniteFuture();  // PreCheckToken's
  ReviewDone done;
};

// Pending TokenReviews, queued per peer (the agent's IP, router.h ClientOf) and served round
// robin, so a peer's backlog delays other peers by at most one review each; each peer may
// queue `max_per_peer`, all together `max_total`. Thread: its owner's (under the reviewer's
// lock).
class ReviewQueue final {
 public:
  enum class Added { kQueued, kPeerFull, kFull };
  ReviewQueue(size_t max_total, size_t max_per_peer)
      : max_total_(max_total), max_per_peer_(max_per_peer) {}
  // Moves `review` in only when it returns kQueued.
  Added Add(const std::string& peer, QueuedReview&& review);
  // The next review in round-robin order over peers; nullopt when empty.
  std::optional<QueuedReview> Next();
  std::vector<QueuedReview> TakeAll();
  bool empty() const { return total_ == 0; }
  size_t size() const { return total_; }

 private:
  const size_t max_total_;
  const size_t max_per_peer_;
  std::map<std::string, std::deque<QueuedReview>> by_peer_;
  std::deque<std::string> turns_;  // peers with queued reviews, the next one first
  size_t total_ = 0;
};

}  // namespace sluice::tunnel::server
