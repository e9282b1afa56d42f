// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "agent/kube/bearer_token.h"
#include "agent/kube/client_config.h"
#include "agent/kube/http_client.h"

namespace sluice::tunnel::server {

struct TokenReviewOptions {
  std::string agent_namespace;
  std::string service_account;
  std::string audience;
  absl::Duration timeout = absl::Seconds(10);  // per review, API round trip included
  size_t max_pending = 1024;                   // queued reviews; more are refused at once
  double qps = 5;                              // requests to the API server per second, and
  int burst = 10;                              // how many may go at once (--kubeconfig-qps/burst)
};

// A token bucket as client-go's rate limiter: `burst` requests at once, then `qps` a second.
// Thread: its user's.
class RequestRate final {
 public:
  RequestRate(double qps, int burst, absl::Time now);
  // Takes one request's token; how long to wait before sending it.
  absl::Duration Take(absl::Time now);

 private:
  const double qps_;
  const double burst_;
  double tokens_;
  absl::Time last_;
};

// Agent authentication by service-account token (upstream proxy-server's --agent-namespace,
// --agent-service-account, --authentication-audience): an agent's bearer token is sent to the
// API server in a TokenReview and must come back authenticated, for the audience, as
// system:serviceaccount:NAMESPACE:SERVICE_ACCOUNT.
// Reviews run one at a time on the reviewer's thread (gRPC reactors must not block) over one
// kept-alive API connection. Thread-safe.
class TokenReviewer final {
 public:
  // OK; Unauthenticated with the reason; Unavailable when the API server could not answer.
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  static absl::StatusOr<std::unique_ptr<TokenReviewer>> Create(const kube::ClientConfig& config,
                                                               TokenReviewOptions options);
  ~TokenReviewer();  // Stop(), then joins the thread
  TokenReviewer(const TokenReviewer&) = delete;
  TokenReviewer& operator=(const TokenReviewer&) = delete;

  // Queues a review of an "authorization" header value; `done` runs once, on the reviewer's
  // thread, or inline when the request is refused at once (no bearer token, queue full,
  // stopped).
  void Review(const std::string& authorization, Done done) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails queued and later reviews with Unavailable and interrupts the running one.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The request for `token`, and the verdict on the API server's answer: pure, for tests.
  static std::string RequestBody(std::string_view token, std::string_view audience);
  static absl::Status Verdict(std::string_view response, const TokenReviewOptions& options);

 private:
  struct Pending {
    std::string token;
    Done done;
  };
  TokenReviewer(TokenReviewOptions options, std::unique_ptr<kube::BearerToken> credentials);
  void Run();
  absl::Status Ask(const std::string& token);

  const TokenReviewOptions options_;
  std::unique_ptr<kube::BearerToken> credentials_;  // the server's own, to the API server
  std::unique_ptr<kube::HttpClient> client_;        // the reviewer thread's only
  RequestRate rate_;                                // the reviewer thread's only
  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::tunnel::server
