// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/lease_controller.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/kube/list_watch.h"

namespace sluice::tunnel::server {
namespace {

constexpr absl::Duration kRequestTimeout = absl::Seconds(10);
// A Lease list of a few servers is a few KiB; anything near this is not ours to hold.
constexpr size_t kMaxBody = 16 << 20;

bool Is2xx(long status) { return status >= 200 && status < 300; }

}  // namespace

absl::StatusOr<std::unique_ptr<LeaseController>> LeaseController::Create(
    const kube::ClientConfig& config, LeaseOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<kube::BearerToken> token,
                   kube::BearerToken::Create(config.token, config.token_file));
  auto controller =
      std::unique_ptr<LeaseController>(new LeaseController(std::move(options), std::move(token)));
  ASSIGN_OR_RETURN(controller->client_, kube::HttpClient::Create(config, *controller->token_));
  return controller;
}

LeaseController::LeaseController(LeaseOptions options, std::unique_ptr<kube::BearerToken> token)
    : options_(std::move(options)), token_(std::move(token)), wait_(*options_.clock) {}

LeaseController::~LeaseController() {
  wait_.Stop();
  if (client_ != nullptr) {
    client_->Stop();  // interrupts a request in flight
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

void LeaseController::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LeaseController::Run() {
  // Both at once first, as upstream's controllers start; then each on its own period, on the
  // monotonic clock (a wall-clock step must not stall renewals).
  base::MonoTime next_renew = base::MonoTime::InfinitePast();
  base::MonoTime next_gc = base::MonoTime::InfinitePast();
  while (!wait_.stopped()) {
    const base::MonoTime now = options_.clock->MonotonicNow();
    if (now >= next_renew) {
      if (absl::Status st = Renew(); !st.ok() && !wait_.stopped()) {
        LOG(WARNING) << "lease " << options_.name_space << "/" << lease_name() << ": " << st;
      }
      next_renew = now + options_.renew_interval;
    }
    if (now >= next_gc) {
      if (auto st = CollectGarbage(); !st.ok() && !wait_.stopped()) {
        LOG(WARNING) << "lease garbage collection in " << options_.name_space << ": "
                     << st.status();
      }
      next_gc = now + options_.gc_interval;
    }
    (void)wait_.SleepUntil(std::min(next_renew, next_gc));
  }
}

absl::StatusOr<kube::HttpResponse> LeaseController::Call(const char* method,
                                                         const std::string& target,
                                                         const std::string& request,
                                                         std::string* body) {
  body->clear();
  auto sink = [body](std::string_view bytes) {
    if (body->size() + bytes.size() > kMaxBody) {
      return absl::ResourceExhaustedError("response over 16 MiB");
    }
    body->append(bytes);
    return absl::OkStatus();
  };
  const std::string_view m = method;
  absl::StatusOr<kube::HttpResponse> r =
      m == "GET"    ? client_->Get(target, kRequestTimeout, sink)
      : m == "POST" ? client_->Post(target, request, kRequestTimeout, sink)
      : m == "PUT"  ? client_->Put(target, request, kRequestTimeout, sink)
                    : client_->Delete(target, request, kRequestTimeout, sink);
  if (r.ok() && r->status == 401) {
    token_->Invalidate();  // a rotated token: the next request reads the file again
  }
  return r;
}

absl::Status LeaseController::Renew() {
  const std::string path = wire::LeasesPath(options_.name_space, lease_name());
  std::string body;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (resource_version_.empty()) {
      ASSIGN_OR_RETURN(kube::HttpResponse got, Call("GET", path, "", &body));
      if (got.status == 404) {
        return CreateLease();
      }
      if (got.status != 200) {
        return absl::UnavailableError(absl::StrCat("GET ", path, ": HTTP ", got.status, ": ",
                                                   kube::StatusMessage(got.error_body)));
      }
      simdjson::dom::element object;
      if (parser_.parse(body).get(object) != simdjson::SUCCESS) {
        return absl::UnavailableError("GET " + path + ": not JSON");
      }
      ASSIGN_OR_RETURN(wire::Lease lease, wire::ParseLease(object));
      resource_version_ = lease.resource_version;
    }
    const std::string update =
        wire::LeaseJson(options_.name_space, lease_name(), options_.labels, options_.server_id,
                        options_.duration, options_.clock->Now(), resource_version_);
    ASSIGN_OR_RETURN(kube::HttpResponse put, Call("PUT", path, update, &body));
    if (put.status == 409 || put.status == 404) {
      resource_version_.clear();  // changed or deleted (expired and collected): look again
      continue;
    }
    if (put.status != 200) {
      resource_version_.clear();
      return absl::UnavailableError(absl::StrCat("PUT ", path, ": HTTP ", put.status, ": ",
                                                 kube::StatusMessage(put.error_body)));
    }
    simdjson::dom::element object;
    auto lease = parser_.parse(body).get(object) == simdjson::SUCCESS
                     ? wire::ParseLease(object)
                     : absl::StatusOr<wire::Lease>(absl::UnavailableError("not JSON"));
    resource_version_ = lease.ok() ? lease->resource_version : "";
    return absl::OkStatus();
  }
  return absl::AbortedError("PUT " + path + ": conflicting updates");
}

absl::Status LeaseController::CreateLease() {
  const std::string path = wire::LeasesPath(options_.name_space);
  std::string body;
  ASSIGN_OR_RETURN(
      kube::HttpResponse r,
      Call("POST", path,
           wire::LeaseJson(options_.name_space, lease_name(), options_.labels, options_.server_id,
                           options_.duration, options_.clock->Now()),
           &body));
  if (!Is2xx(r.status)) {
    return absl::UnavailableError(
        absl::StrCat("POST ", path, ": HTTP ", r.status, ": ", kube::StatusMessage(r.error_body)));
  }
  simdjson::dom::element object;
  if (parser_.parse(body).get(object) == simdjson::SUCCESS) {
    if (auto lease = wire::ParseLease(object); lease.ok()) {
      resource_version_ = lease->resource_version;
    }
  }
  LOG(INFO) << "created lease " << options_.name_space << "/" << lease_name();
  return absl::OkStatus();
}

absl::StatusOr<int> LeaseController::CollectGarbage() {
  const std::string path =
      absl::StrCat(wire::LeasesPath(options_.name_space),
                   "?labelSelector=", kube::QueryEscape(wire::LeaseSelector(options_.labels)));
  std::string body;
  ASSIGN_OR_RETURN(kube::HttpResponse r, Call("GET", path, "", &body));
  if (r.status != 200) {
    return absl::UnavailableError(
        absl::StrCat("GET ", path, ": HTTP ", r.status, ": ", kube::StatusMessage(r.error_body)));
  }
  std::vector<wire::Lease> expired;
  const absl::Time now = options_.clock->Now();
  absl::Status parsed = kube::ParseListPage(parser_, body, [&](const simdjson::dom::element& o) {
                          auto lease = wire::ParseLease(o);
                          if (lease.ok() && !wire::LeaseValid(*lease, now)) {
                            expired.push_back(std::move(*lease));
                          }
                        }).status();
  RETURN_IF_ERROR(parsed);
  int culled = 0;
  for (const wire::Lease& lease : expired) {
    // Optimistic concurrency, as upstream: a Lease renewed since the list is not deleted.
    std::string options = R"({"apiVersion":"v1","kind":"DeleteOptions","preconditions":{)"
                          R"("resourceVersion":)";
    base::AppendJsonString(lease.resource_version, options);
    options += "}}";
    const std::string target = wire::LeasesPath(options_.name_space, lease.name);
    ASSIGN_OR_RETURN(kube::HttpResponse d, Call("DELETE", target, options, &body));
    if (Is2xx(d.status)) {
      ++culled;
      if (options_.culled != nullptr) {
        options_.culled->Inc();
      }
      LOG(INFO) << "deleted expired lease " << options_.name_space << "/" << lease.name << " of "
                << lease.holder;
    } else if (d.status == 404 || d.status == 409) {
      VLOG(1) << "lease " << lease.name << ": already deleted or renewed (HTTP " << d.status << ")";
    } else {
      LOG(WARNING) << "DELETE " << target << ": HTTP " << d.status << ": "
                   << kube::StatusMessage(d.error_body);
    }
  }
  return culled;
}

}  // namespace sluice::tunnel::server
