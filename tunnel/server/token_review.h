// SPDX-License-Identifier: Apache-2.0
#pragma once

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
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/client_config.h"
#include "lib/kube/http_client.h"

#include "tunnel/server/review_queue.h"
#include "tunnel/server/token_check.h"

namespace sluice::tunnel::server {

struct TokenReviewOptions {
  std::string agent_namespace;
  std::string service_account;
  std::string audience;
  absl::Duration timeout = absl::Seconds(10);  // per review, API round trip included
  size_t max_pending = 1024;                   // queued reviews; more are refused at once
  size_t max_pending_per_peer = 8;             // of them from one agent IP
  double qps = 5;                              // requests to the API server per second, and
  int burst = 10;                              // how many may go at once (--kubeconfig-qps/burst)
  // Verdicts remembered by token digest: accepted ones until the token expires, at most
  // max_cache_ttl (kube-apiserver's webhook token cache default, 2 min: how long a revoked
  // token may still be admitted); refusals for negative_cache_ttl.
  size_t cache_entries = 4096;
  absl::Duration max_cache_ttl = absl::Minutes(2);
  absl::Duration negative_cache_ttl = absl::Seconds(10);
  const base::Clock* clock = &base::RealClock::Get();
  base::Family<base::Counter>* outcomes = nullptr;  // {outcome}, see TokenReviewer::Review
};

// A token bucket as client-go's rate limiter: `burst` requests at once, then `qps` a second.
// Thread: its user's.
class RequestRate final {
 public:
  RequestRate(double qps, int burst, base::MonoTime now);
  // Takes one request's token; how long to wait before sending it.
  absl::Duration Take(base::MonoTime now);

 private:
  const double qps_;
  const double burst_;
  double tokens_;
  base::MonoTime last_;
};

// Agent authentication by service-account token (upstream proxy-server's --agent-namespace,
// --agent-service-account, --authentication-audience): an agent's bearer token is sent to the
// API server in a TokenReview and must come back authenticated, for the audience, as
// system:serviceaccount:NAMESPACE:SERVICE_ACCOUNT.
// Reviews run one at a time on the reviewer's thread (gRPC reactors must not block) over one
// kept-alive API connection. A token is reviewed only after PreCheckToken, and only if no
// verdict on it is cached; peers are served round robin with a cap each (ReviewQueue), so one
// peer's junk tokens cannot hold the queue. Thread-safe.
class TokenReviewer final {
 public:
  // The agent, or Unauthenticated / PermissionDenied with the reason, or Unavailable when the
  // API server could not answer or the queue is full.
  using Done = ReviewDone;

  static absl::StatusOr<std::unique_ptr<TokenReviewer>> Create(const kube::ClientConfig& config,
                                                               TokenReviewOptions options);
  ~TokenReviewer();  // Stop(), then joins the thread
  TokenReviewer(const TokenReviewer&) = delete;
  TokenReviewer& operator=(const TokenReviewer&) = delete;

  // Queues a review of an "authorization" header value from `peer` (ClientOf); `done` runs
  // once, on the reviewer's thread, or inline when answered at once (no bearer token, failed
  // pre-check, cached verdict, queue full, stopped). Each way is counted in `outcomes`:
  // no_token, precheck_refused, cache_accepted, cache_refused, peer_limit, queue_full,
  // accepted, refused, unavailable.
  void Review(const std::string& authorization, const std::string& peer, Done done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Fails queued and later reviews with Unavailable and interrupts the running one.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The request for `token`, and the verdict on the API server's answer: pure, for tests.
  static std::string RequestBody(std::string_view token, std::string_view audience);
  static ReviewResult Verdict(std::string_view response, const TokenReviewOptions& options);

 private:
  TokenReviewer(TokenReviewOptions options, std::unique_ptr<kube::BearerToken> credentials);
  void Run();
  // Reviews `next` (or answers it from the cache, filled meanwhile by a review of the same
  // token) and caches the verdict.
  void Serve(QueuedReview next) ABSL_LOCKS_EXCLUDED(mu_);
  ReviewResult Ask(const std::string& token);
  void Count(const char* outcome);

  const TokenReviewOptions options_;
  std::unique_ptr<kube::BearerToken> credentials_;  // the server's own, to the API server
  std::unique_ptr<kube::HttpClient> client_;        // the reviewer thread's only
  RequestRate rate_;                                // the reviewer thread's only
  base::Waiter rate_wait_;  // the reviewer thread's sleep for rate_; Stop() ends it
  absl::Mutex mu_;
  ReviewQueue queue_ ABSL_GUARDED_BY(mu_);
  VerdictCache cache_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::tunnel::server
