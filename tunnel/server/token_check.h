// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice::tunnel::server {

// What an accepted TokenReview says about the agent.
struct ReviewedAgent {
  // status.user.extra["authentication.kubernetes.io/node-name"][0]: the node a bound
  // service-account token was issued for (Kubernetes >= 1.30); empty when absent.
  std::string node;
};
using ReviewResult = absl::StatusOr<ReviewedAgent>;
using ReviewDone = absl::AnyInvocable<void(ReviewResult) &&>;

// Largest bearer token reviewed. Service-account JWTs are ~1 KiB; gRPC's default metadata
// limit (8 KiB) would cut a larger header anyway, this bounds what reaches the API server.
inline constexpr size_t kMaxTokenBytes = 8 * 1024;

// The checks a token must pass before it costs a TokenReview, without verifying it: size,
// JWT compact syntax (three base64url parts, header and payload JSON objects; service-account
// tokens are always JWTs), and an `exp` claim not before `now`. Returns the token's expiry
// (InfiniteFuture without `exp`), or Unauthenticated with the reason.
absl::StatusOr<absl::Time> PreCheckToken(std::string_view token, absl::Time now);

// SHA-256 of a token: what the verdict cache is keyed by, so no token is kept in memory.
using TokenDigest = std::array<uint8_t, 32>;
TokenDigest DigestOf(std::string_view token);

// TokenReview verdicts by token digest. Accepted tokens are remembered until the token expires,
// at most `max_ttl`; refusals for `negative_ttl`; API trouble (Unavailable) not at all. When
// full, refusals make room first, so junk tokens cannot push out agents' verdicts.
// Thread: its owner's (the reviewer holds it under its lock).
class VerdictCache final {
 public:
  VerdictCache(size_t capacity, absl::Duration max_ttl, absl::Duration negative_ttl)
      : capacity_(capacity), max_ttl_(max_ttl), negative_ttl_(negative_ttl) {}
  // The verdict, if one is remembered and still fresh; null otherwise.
  const ReviewResult* Lookup(const TokenDigest& digest, absl::Time now);
  void Store(const TokenDigest& digest, const ReviewResult& result, absl::Time token_expiry,
             absl::Time now);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    ReviewResult result;
    absl::Time until;
  };
  // Frees one slot for a verdict that is `positive` or not; false if none may go.
  bool MakeRoom(bool positive, absl::Time now);

  const size_t capacity_;
  const absl::Duration max_ttl_;
  const absl::Duration negative_ttl_;
  absl::flat_hash_map<TokenDigest, Entry> entries_;
};

}  // namespace sluice::tunnel::server
