// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_review.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "simdjson.h"

#include "agent/base/clock.h"
#include "agent/base/json.h"
#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/base/strings.h"
#include "agent/kube/list_watch.h"

namespace sluice::tunnel::server {
namespace {

constexpr char kTokenReviews[] = "/apis/authentication.k8s.io/v1/tokenreviews";
constexpr char kServiceAccountPrefix[] = "system:serviceaccount:";
constexpr size_t kMaxResponse = 1 << 20;

// The rate limiter's time line: a wall-clock step must not stall reviews or release a burst.
absl::Time MonotonicTime() { return absl::UnixEpoch() + base::MonotonicNow(); }

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
      rate_(options_.qps, options_.burst, MonotonicTime()) {}

RequestRate::RequestRate(double qps, int burst, absl::Time now)
    : qps_(qps), burst_(std::max(burst, 1)), tokens_(burst_), last_(now) {}

absl::Duration RequestRate::Take(absl::Time now) {
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

void TokenReviewer::Review(const std::string& authorization, Done done) {
  absl::string_view token = authorization;
  if (!absl::ConsumePrefix(&token, "Bearer ") || token.empty()) {
    std::move(done)(absl::UnauthenticatedError("no bearer token"));
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      refused = absl::UnavailableError("shutting down");
    } else if (queue_.size() >= options_.max_pending) {
      refused = absl::UnavailableError("too many token reviews pending; retry later");
    } else {
      queue_.push_back({std::string(token), std::move(done)});
      return;
    }
  }
  std::move(done)(std::move(refused));
}

void TokenReviewer::Stop() {
  std::deque<Pending> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    dropped.swap(queue_);
  }
  if (client_) {
    client_->Stop();
  }
  for (Pending& p : dropped) {
    std::move(p.done)(absl::UnavailableError("shutting down"));
  }
}

void TokenReviewer::Run() {
  for (;;) {
    Pending next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TokenReviewer* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stopped_ || !r->queue_.empty(); },
          this));
      if (stopped_) {
        return;  // Stop() failed what was queued
      }
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    // Wait out the rate limit; Stop() ends the wait (and fails this review below).
    if (const absl::Duration wait = rate_.Take(MonotonicTime()); wait > absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopped_), wait);
      if (stopped_) {
        std::move(next.done)(absl::UnavailableError("shutting down"));
        return;
      }
    }
    std::move(next.done)(Ask(next.token));
  }
}

absl::Status TokenReviewer::Ask(const std::string& token) {
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

absl::Status TokenReviewer::Verdict(std::string_view response, const TokenReviewOptions& options) {
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
  return absl::OkStatus();
}

}  // namespace sluice::tunnel::server
