// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_review.h"

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
  return TokenReviewer::Verdict(Response(status), kOptions).code();
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
  const absl::Status st = TokenReviewer::Verdict(
      Response(R"({"authenticated":false,"error":"invalid bearer token"})"), kOptions);
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
  EXPECT_EQ(TokenReviewer::Verdict("{", kOptions).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(TokenReviewer::Verdict(R"({"kind":"Status"})", kOptions).code(),
            absl::StatusCode::kUnavailable);
}

absl::Status ReviewNow(TokenReviewer& reviewer, std::string authorization) {
  absl::Notification done;
  absl::Status result;
  reviewer.Review(std::move(authorization), [&](absl::Status st) {
    result = std::move(st);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

TEST(TokenReviewTest, NoTokenUnreachableServerAndStop) {
  kube::ClientConfig config;
  config.server = "http://127.0.0.1:1";  // nothing listens on port 1
  auto reviewer = TokenReviewer::Create(config, kOptions);
  ASSERT_TRUE(reviewer.ok()) << reviewer.status();
  EXPECT_EQ(ReviewNow(**reviewer, "").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ReviewNow(**reviewer, "Basic Zm9v").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ReviewNow(**reviewer, "Bearer t").code(), absl::StatusCode::kUnavailable);
  (*reviewer)->Stop();
  EXPECT_EQ(ReviewNow(**reviewer, "Bearer t").code(), absl::StatusCode::kUnavailable);
}

TEST(RequestRateTest, BurstThenQps) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  RequestRate rate(/*qps=*/2, /*burst=*/3, t0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rate.Take(t0), absl::ZeroDuration());
  }
  EXPECT_EQ(rate.Take(t0), absl::Milliseconds(500));  // the 4th waits one token's time
  EXPECT_EQ(rate.Take(t0 + absl::Milliseconds(500)), absl::Milliseconds(500));
  // A long quiet period refills only up to the burst.
  const absl::Time later = t0 + absl::Seconds(60);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rate.Take(later), absl::ZeroDuration());
  }
  EXPECT_GT(rate.Take(later), absl::ZeroDuration());
}

}  // namespace
}  // namespace sluice::tunnel::server
