// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_check.h"

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

#include "tunnel/server/review_queue.h"

namespace sluice::tunnel::server {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

std::string Jwt(const std::string& payload) {
  return absl::WebSafeBase64Escape(R"({"alg":"RS256","kid":"k"})") + "." +
         absl::WebSafeBase64Escape(payload) + ".c2lnbmF0dXJl";
}

TEST(PreCheckTokenTest, AcceptsJwtsAndReadsTheExpiry) {
  auto expiry = PreCheckToken(Jwt(R"({"sub":"x","exp":1700003600})"), kNow);
  ASSERT_TRUE(expiry.ok()) << expiry.status();
  EXPECT_EQ(*expiry, absl::FromUnixSeconds(1'700'003'600));
  // Legacy secret-based tokens carry no exp.
  EXPECT_EQ(PreCheckToken(Jwt(R"({"sub":"x"})"), kNow).value(), absl::InfiniteFuture());
  EXPECT_EQ(PreCheckToken(Jwt(R"({"exp":1e300})"), kNow).value(), absl::InfiniteFuture());
}

TEST(PreCheckTokenTest, RefusesWhatNeedsNoApiServer) {
  for (const std::string& junk :
       {std::string("good"), std::string("a.b.c"), std::string("a.b"), Jwt("{}") + ".x", Jwt("[1]"),
        Jwt("{}").replace(0, 1, "*"), absl::WebSafeBase64Escape("{}") + ".e30.",
        std::string(kMaxTokenBytes + 1, 'a')}) {
    absl::StatusOr<absl::Time> r = PreCheckToken(junk, kNow);
    EXPECT_TRUE(absl::IsUnauthenticated(r.status())) << junk << ": " << r.status();
  }
  const absl::Status expired = PreCheckToken(Jwt(R"({"exp":1699999999})"), kNow).status();
  EXPECT_TRUE(absl::IsUnauthenticated(expired));
  EXPECT_NE(expired.message().find("expired"), absl::string_view::npos) << expired;
}

TEST(DigestOfTest, Sha256) {
  const TokenDigest d = DigestOf("abc");  // FIPS 180-2 test vector
  EXPECT_EQ(
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size())),
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(VerdictCacheTest, AcceptedUntilExpiryAtMostMaxTtlRefusedForNegativeTtl) {
  VerdictCache cache(16, absl::Minutes(2), absl::Seconds(10));
  const TokenDigest good = DigestOf("good");
  const TokenDigest soon = DigestOf("soon");
  const TokenDigest bad = DigestOf("bad");
  const TokenDigest flaky = DigestOf("flaky");
  cache.Store(good, ReviewedAgent{"node-a"}, absl::InfiniteFuture(), kNow);
  cache.Store(soon, ReviewedAgent{}, kNow + absl::Seconds(30), kNow);
  cache.Store(bad, absl::UnauthenticatedError("no"), absl::InfiniteFuture(), kNow);
  cache.Store(flaky, absl::UnavailableError("API down"), absl::InfiniteFuture(), kNow);
  ASSERT_NE(cache.Lookup(good, kNow), nullptr);
  EXPECT_EQ(cache.Lookup(good, kNow)->value().node, "node-a");
  EXPECT_TRUE(absl::IsUnauthenticated(cache.Lookup(bad, kNow)->status()));
  EXPECT_EQ(cache.Lookup(flaky, kNow), nullptr);  // API trouble is no verdict
  EXPECT_EQ(cache.Lookup(bad, kNow + absl::Seconds(10)), nullptr);
  EXPECT_NE(cache.Lookup(soon, kNow + absl::Seconds(29)), nullptr);
  EXPECT_EQ(cache.Lookup(soon, kNow + absl::Seconds(30)), nullptr);  // the token expired
  EXPECT_NE(cache.Lookup(good, kNow + absl::Seconds(119)), nullptr);
  EXPECT_EQ(cache.Lookup(good, kNow + absl::Minutes(2)), nullptr);
}

TEST(VerdictCacheTest, JunkCannotPushOutAcceptedTokens) {
  VerdictCache cache(2, absl::Minutes(2), absl::Seconds(10));
  const TokenDigest good = DigestOf("good");
  cache.Store(good, ReviewedAgent{}, absl::InfiniteFuture(), kNow);
  for (int i = 0; i < 100; ++i) {
    cache.Store(DigestOf("junk" + std::to_string(i)), absl::UnauthenticatedError("no"),
                absl::InfiniteFuture(), kNow);
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.Lookup(good, kNow), nullptr);
  // An accepted token makes room by dropping a refusal.
  const TokenDigest other = DigestOf("other");
  cache.Store(other, ReviewedAgent{}, absl::InfiniteFuture(), kNow);
  EXPECT_NE(cache.Lookup(good, kNow), nullptr);
  EXPECT_NE(cache.Lookup(other, kNow), nullptr);
}

QueuedReview Review(const std::string& token) {
  return QueuedReview{.token = token, .done = [](ReviewResult) {}};
}

TEST(ReviewQueueTest, CapsEachPeerAndServesPeersInTurn) {
  ReviewQueue q(/*max_total=*/6, /*max_per_peer=*/3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(q.Add("junk", Review("j" + std::to_string(i))), ReviewQueue::Added::kQueued);
  }
  QueuedReview refused = Review("j3");
  EXPECT_EQ(q.Add("junk", std::move(refused)), ReviewQueue::Added::kPeerFull);
  EXPECT_EQ(refused.token, "j3");  // not moved from
  EXPECT_EQ(q.Add("agent", Review("a0")), ReviewQueue::Added::kQueued);
  EXPECT_EQ(q.Add("other", Review("o0")), ReviewQueue::Added::kQueued);
  EXPECT_EQ(q.Add("other", Review("o1")), ReviewQueue::Added::kQueued);
  EXPECT_EQ(q.Add("third", Review("t0")), ReviewQueue::Added::kFull);
  std::vector<std::string> order;
  while (auto r = q.Next()) {
    order.push_back(r->token);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"j0", "a0", "o0", "j1", "o1", "j2"}));
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace sluice::tunnel::server
