// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_review.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/clock.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"
#include "lib/kube/list_watch.h"
#include "simdjson.h"

namespace sluice::tunnel::server {
namespace {

constexpr char kTokenReviews[] = "/apis/authentication.k8s.io/v1/tokenreviews";
constexpr char kServiceAccountPrefix[] = "system:serviceaccount:";
constexpr size_t kMaxResponse = 1 << 20;
constexpr char kNodeClaim[] = "authentication.kubernetes.io/node-name";

}  // namespace

absl::StatusOr<std::unique_ptr<TokenReviewer>> TokenReviewer::Create(
    const kube::ClientConfig& config, TokenReviewOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<kube::BearerToken> credentials,
                   kube::BearerToken::Create(config.token, config.token_file));
  auto reviewer =
      std::unique_ptr<TokenReviewer>(new TokenReviewer(std::move(options), std::move(credentials)));
  ASSIGN_OR_RETURN(reviewer->client_, kube::HttpClient::Create(config, *reviewer->credentials_));
  reviewer->thread_ = std::thread([r = reviewer.get()] { r->Run(); });
  return reviewer;
}

TokenReviewer::TokenReviewer(TokenReviewOptions options,
                             std::unique_ptr<kube::BearerToken> credentials)
    : options_(std::move(options)),
      credentials_(std::move(credentials)),
      // The limiter's time line is monotonic: a wall-clock step must not stall reviews or
      // release a burst.
      rate_(options_.qps, options_.burst, options_.clock->MonotonicNow()),
      rate_wait_(*options_.clock),
      queue_(options_.max_pending, options_.max_pending_per_peer),
      cache_(options_.cache_entries, options_.max_cache_ttl, options_.negative_cache_ttl) {}

void TokenReviewer::Count(const char* outcome) {
  if (options_.outcomes != nullptr) {
    options_.outcomes->WithLabels({outcome}).Inc();
  }
}

RequestRate::RequestRate(double qps, int burst, base::MonoTime now)
    : qps_(qps), burst_(std::max(burst, 1)), tokens_(burst_), last_(now) {}

absl::Duration RequestRate::Take(base::MonoTime now) {
  tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
  last_ = now;
  tokens_ -= 1;  // may go negative: the debt is the wait
  return tokens_ >= 0 ? absl::ZeroDuration() : absl::Seconds(-tokens_ / qps_);
}

TokenReviewer::~TokenReviewer() {
  Stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void TokenReviewer::Review(const std::string& authorization, const std::string& peer, Done done) {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
    Count("no_token");
    std::move(done)(absl::UnauthenticatedError("no bearer token"));
    return;
  }
  const absl::Time now = options_.clock->Now();
  absl::StatusOr<absl::Time> expiry = PreCheckToken(base::Std(token), now);
  if (!expiry.ok()) {
    Count("precheck_refused");
    std::move(done)(expiry.status());
    return;
  }
  QueuedReview review{std::string(token), DigestOf(base::Std(token)), *expiry, std::move(done)};
  ReviewResult answer = absl::UnavailableError("shutting down");
  {
    absl::MutexLock lock(&mu_);
    if (const ReviewResult* cached = cache_.Lookup(review.digest, now)) {
      Count(cached->ok() ? "cache_accepted" : "cache_refused");
      answer = *cached;
    } else if (!stopped_) {
      switch (queue_.Add(peer, std::move(review))) {
        case ReviewQueue::Added::kQueued:
          return;
        case ReviewQueue::Added::kPeerFull:
          Count("peer_limit");
          answer = absl::UnavailableError(
              "too many token reviews pending from this address; retry later");
          break;
        case ReviewQueue::Added::kFull:
          Count("queue_full");
          answer = absl::UnavailableError("too many token reviews pending; retry later");
          break;
      }
    }
  }
  // Add moves `review` only when it queues it, and then this line is not reached.
  std::move(review.done)(std::move(answer));  // NOLINT(bugprone-use-after-move)
}

void TokenReviewer::Stop() {
  std::vector<QueuedReview> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    dropped = queue_.TakeAll();
  }
  rate_wait_.Stop();
  if (client_) {
    client_->Stop();
  }
  for (QueuedReview& r : dropped) {
    std::move(r.done)(absl::UnavailableError("shutting down"));
  }
}

void TokenReviewer::Run() {
  for (;;) {
    std::optional<QueuedReview> next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TokenReviewer* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stopped_ || !r->queue_.empty(); },
          this));
      if (stopped_) {
        return;  // Stop() failed what was queued
      }
      next = queue_.Next();
    }
    // Wait out the rate limit; Stop() ends the wait (and fails this review below).
    if (!rate_wait_.SleepFor(rate_.Take(options_.clock->MonotonicNow()))) {
      std::move(next->done)(absl::UnavailableError("shutting down"));
      return;
    }
    Serve(std::move(*next));
  }
}

void TokenReviewer::Serve(QueuedReview next) {
  std::optional<ReviewResult> cached;
  {
    absl::MutexLock lock(&mu_);
    if (const ReviewResult* c = cache_.Lookup(next.digest, options_.clock->Now())) {
      cached = *c;
    }
  }
  if (cached) {
    Count(cached->ok() ? "cache_accepted" : "cache_refused");
    std::move(next.done)(std::move(*cached));
    return;
  }
  ReviewResult result = Ask(next.token);
  Count(result.ok()                            ? "accepted"
        : absl::IsUnavailable(result.status()) ? "unavailable"
                                               : "refused");
  {
    absl::MutexLock lock(&mu_);
    cache_.Store(next.digest, result, next.expiry, options_.clock->Now());
  }
  std::move(next.done)(std::move(result));
}

ReviewResult TokenReviewer::Ask(const std::string& token) {
  std::string body;
  auto sink = [&body](std::string_view bytes) {
    if (body.size() + bytes.size() > kMaxResponse) {
      return absl::ResourceExhaustedError("TokenReview response over 1 MiB");
    }
    body.append(bytes);
    return absl::OkStatus();
  };
  absl::StatusOr<kube::HttpResponse> response =
      client_->Post(kTokenReviews, RequestBody(token, options_.audience), options_.timeout, sink);
  if (response.ok() && response->status == 401) {
    credentials_->Invalidate();  // a rotated token file: the next review re-reads it
  }
  if (!response.ok()) {
    return absl::UnavailableError(absl::StrCat("TokenReview: ", response.status().message()));
  }
  if (response->status != 200 && response->status != 201) {
    return absl::UnavailableError(absl::StrCat("TokenReview: HTTP ", response->status, ": ",
                                               kube::StatusMessage(response->error_body)));
  }
  return Verdict(body, options_);
}

std::string TokenReviewer::RequestBody(std::string_view token, std::string_view audience) {
  std::string body =
      R"({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":)";
  base::AppendJsonString(token, body);
  if (!audience.empty()) {
    body += R"(,"audiences":[)";
    base::AppendJsonString(audience, body);
    body += "]";
  }
  body += "}}";
  return body;
}

ReviewResult TokenReviewer::Verdict(std::string_view response, const TokenReviewOptions& options) {
  simdjson::dom::parser parser;
  simdjson::dom::element status;
  if (parser.parse(response.data(), response.size())["status"].get(status) != simdjson::SUCCESS) {
    return absl::UnavailableError("TokenReview: response without a status");
  }
  bool authenticated = false;
  if (status["authenticated"].get(authenticated) != simdjson::SUCCESS || !authenticated) {
    std::string_view error;
    if (status["error"].get(error) != simdjson::SUCCESS) {
      error = "not authenticated";
    }
    return absl::UnauthenticatedError(absl::StrCat("token review: ", base::Absl(error)));
  }
  // An API server that ignores spec.audiences would accept any audience; the TokenReview
  // contract says a client that sets them must find one in status.audiences.
  if (!options.audience.empty()) {
    bool found = false;
    simdjson::dom::array audiences;
    if (status["audiences"].get(audiences) == simdjson::SUCCESS) {
      for (simdjson::dom::element a : audiences) {
        std::string_view s;
        found = found || (a.get(s) == simdjson::SUCCESS && s == options.audience);
      }
    }
    if (!found) {
      return absl::UnauthenticatedError(
          absl::StrCat("token not valid for audience \"", options.audience, "\""));
    }
  }
  std::string_view username;
  if (status["user"]["username"].get(username) != simdjson::SUCCESS) {
    return absl::UnauthenticatedError("token review: no username");
  }
  absl::string_view rest = base::Absl(username);
  std::vector<absl::string_view> parts;
  if (absl::ConsumePrefix(&rest, kServiceAccountPrefix)) {
    parts = absl::StrSplit(rest, ':');
  }
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat("user \"", base::Absl(username), "\" is not a service account"));
  }
  if (parts[0] != options.agent_namespace || parts[1] != options.service_account) {
    return absl::PermissionDeniedError(
        absl::StrCat("service account ", parts[0], "/", parts[1], " is not allowed (want ",
                     options.agent_namespace, "/", options.service_account, ")"));
  }
  ReviewedAgent agent;
  std::string_view node;
  if (status["user"]["extra"][kNodeClaim].at(0).get(node) == simdjson::SUCCESS) {
    agent.node = std::string(node);
  }
  return agent;
}

}  // namespace sluice::tunnel::server
