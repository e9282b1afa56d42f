// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_review.h"

#include "absl/strings/escaping.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "simdjson.h"

namespace sluice::tunnel::server {
namespace {

const TokenReviewOptions kOptions{.agent_namespace = "kube-system",
                                  .service_account = "konnectivity-agent",
                                  .audience = "system:konnectivity-server"};

std::string Response(const std::string& status) {
  return R"({"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","status":)" + status +
         "}";
}

absl::StatusCode Code(const std::string& status) {
  return TokenReviewer::Verdict(Response(status), kOptions).status().code();
}

TEST(TokenReviewTest, RequestCarriesTokenAndAudienceAsJson) {
  simdjson::dom::parser parser;
  const std::string body = TokenReviewer::RequestBody("a\"b\\c", "aud");
  simdjson::dom::element spec;
  ASSERT_EQ(parser.parse(body)["spec"].get(spec), simdjson::SUCCESS) << body;
  EXPECT_EQ(std::string_view(spec["token"]), "a\"b\\c");
  EXPECT_EQ(std::string_view(spec["audiences"].at(0)), "aud");
  EXPECT_EQ(TokenReviewer::RequestBody("t", "").find("audiences"), std::string::npos);
}

TEST(TokenReviewTest, AcceptsTheAgentServiceAccountForTheAudience) {
  EXPECT_EQ(Code(R"({"authenticated":true,"audiences":["x","system:konnectivity-server"],
      "user":{"username":"system:serviceaccount:kube-system:konnectivity-agent"}})"),
            absl::StatusCode::kOk);
}

TEST(TokenReviewTest, RefusesWithTheReason) {
  const absl::Status st =
      TokenReviewer::Verdict(Response(R"({"authenticated":false,"error":"invalid bearer token"})"),
                             kOptions)
          .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(st.message().find("invalid bearer token"), absl::string_view::npos) << st;
  EXPECT_EQ(Code(R"({})"), absl::StatusCode::kUnauthenticated);
  // Authenticated, but not for our audience (or by a server that ignores audiences).
  EXPECT_EQ(Code(R"({"authenticated":true,"audiences":["https://kubernetes.default.svc"],
      "user":{"username":"system:serviceaccount:kube-system:konnectivity-agent"}})"),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(R"({"authenticated":true,
      "user":{"username":"system:serviceaccount:kube-system:konnectivity-agent"}})"),
            absl::StatusCode::kUnauthenticated);
  // Not a service account, or another one.
  const std::string aud = R"("audiences":["system:konnectivity-server"],)";
  EXPECT_EQ(Code(R"({"authenticated":true,)" + aud + R"("user":{"username":"admin"}})"),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(R"({"authenticated":true,)" + aud +
                 R"("user":{"username":"system:serviceaccount:kube-system:a:b"}})"),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(R"({"authenticated":true,)" + aud +
                 R"("user":{"username":"system:serviceaccount:default:konnectivity-agent"}})"),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(R"({"authenticated":true,)" + aud +
                 R"("user":{"username":"system:serviceaccount:kube-system:default"}})"),
            absl::StatusCode::kPermissionDenied);
}

TEST(TokenReviewTest, MalformedResponseIsUnavailableNotAPass) {
  EXPECT_EQ(TokenReviewer::Verdict("{", kOptions).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(TokenReviewer::Verdict(R"({"kind":"Status"})", kOptions).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(TokenReviewTest, ReadsTheNodeClaim) {
  const std::string ok = R"({"authenticated":true,"audiences":["system:konnectivity-server"],
      "user":{"username":"system:serviceaccount:kube-system:konnectivity-agent")";
  EXPECT_EQ(TokenReviewer::Verdict(Response(ok + "}}"), kOptions).value().node, "");
  EXPECT_EQ(TokenReviewer::Verdict(
                Response(ok + R"(,"extra":{"authentication.kubernetes.io/node-name":["node-a"],
                    "authentication.kubernetes.io/pod-name":["p"]}}})"),
                kOptions)
                .value()
                .node,
            "node-a");
}

// "Bearer " and a JWT whose payload is `payload`.
std::string BearerJwt(const std::string& payload) {
  return "Bearer " + absl::WebSafeBase64Escape(R"({"alg":"RS256"})") + "." +
         absl::WebSafeBase64Escape(payload) + ".c2ln";
}

ReviewResult ReviewNow(TokenReviewer& reviewer, std::string authorization) {
  absl::Notification done;
  ReviewResult result;
  reviewer.Review(std::move(authorization), "peer", [&](ReviewResult r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::StatusCode ReviewCode(TokenReviewer& reviewer, std::string authorization) {
  return ReviewNow(reviewer, std::move(authorization)).status().code();
}

TEST(TokenReviewTest, NoTokenJunkExpiredUnreachableServerAndStop) {
  kube::ClientConfig config;
  config.server = "http://127.0.0.1:1";  // nothing listens on port 1
  base::FakeClock clock(absl::FromUnixSeconds(2'000'000'000));
  base::Registry registry;
  TokenReviewOptions options = kOptions;
  options.clock = &clock;
  options.outcomes = &registry.AddCounter("outcomes", "", {"outcome"});
  auto reviewer = TokenReviewer::Create(config, options);
  ASSERT_TRUE(reviewer.ok()) << reviewer.status();
  EXPECT_EQ(ReviewCode(**reviewer, ""), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ReviewCode(**reviewer, "Basic Zm9v"), absl::StatusCode::kUnauthenticated);
  // Neither junk nor an expired token (by the injected clock) reaches the API server.
  EXPECT_EQ(ReviewCode(**reviewer, "Bearer t"), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ReviewCode(**reviewer, BearerJwt(R"({"exp":1999999999})")),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(options.outcomes->WithLabels({"precheck_refused"}).Value(), 2);
  EXPECT_EQ(ReviewCode(**reviewer, BearerJwt(R"({"exp":2000000001})")),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(options.outcomes->WithLabels({"unavailable"}).Value(), 1);
  (*reviewer)->Stop();
  EXPECT_EQ(ReviewCode(**reviewer, BearerJwt("{}")), absl::StatusCode::kUnavailable);
}

TEST(TokenReviewTest, RateLimitIsWaitedOutOnTheInjectedClock) {
  kube::ClientConfig config;
  config.server = "http://127.0.0.1:1";  // refused at once: each review is "unavailable"
  base::FakeClock clock(absl::FromUnixSeconds(2'000'000'000));
  TokenReviewOptions options = kOptions;
  options.clock = &clock;
  options.qps = 1;
  options.burst = 1;
  auto reviewer = TokenReviewer::Create(config, options);
  ASSERT_TRUE(reviewer.ok()) << reviewer.status();
  const std::string token = BearerJwt(R"({"exp":2000000100})");
  EXPECT_EQ(ReviewCode(**reviewer, token), absl::StatusCode::kUnavailable);  // the burst
  absl::Notification done;
  (*reviewer)->Review(token, "peer", [&](ReviewResult) { done.Notify(); });
  ASSERT_TRUE(clock.AwaitSleepers(1));  // the second waits a token's time on the fake clock
  EXPECT_FALSE(done.HasBeenNotified());
  clock.Advance(absl::Seconds(1));
  done.WaitForNotification();
}

TEST(RequestRateTest, BurstThenQps) {
  const base::MonoTime t0 = base::MonoTime::FromSinceOrigin(absl::Seconds(1000));
  RequestRate rate(/*qps=*/2, /*burst=*/3, t0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rate.Take(t0), absl::ZeroDuration());
  }
  EXPECT_EQ(rate.Take(t0), absl::Milliseconds(500));  // the 4th waits one token's time
  EXPECT_EQ(rate.Take(t0 + absl::Milliseconds(500)), absl::Milliseconds(500));
  // A long quiet period refills only up to the burst.
  const base::MonoTime later = t0 + absl::Seconds(60);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rate.Take(later), absl::ZeroDuration());
  }
  EXPECT_GT(rate.Take(later), absl::ZeroDuration());
}

}  // namespace
}  // namespace sluice::tunnel::server
