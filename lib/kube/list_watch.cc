// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/list_watch.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

namespace sluice::kube {

namespace {

// A watch that delivered events or stayed up this long was healthy: the backoff starts over,
// and a normal end re-watches at once. A shorter, empty one backs off, so a server that closes
// every stream at once cannot make us spin.
constexpr absl::Duration kHealthyWatch = absl::Seconds(5);
constexpr size_t kLoggedBytes = 200;

std::string_view Prefix(std::string_view s) { return s.substr(0, kLoggedBytes); }

}  // namespace

absl::StatusOr<ListPage> ParseListPage(
    simdjson::dom::parser& parser, std::string_view body,
    absl::FunctionRef<void(const simdjson::dom::element&)> on_item) {
  simdjson::dom::element list;
  if (auto error = parser.parse(body.data(), body.size()).get(list)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: ", simdjson::error_message(error)));
  }
  ListPage page;
  simdjson::dom::element metadata;
  std::string_view rv;
  if (list["metadata"].get(metadata) != simdjson::SUCCESS ||
      metadata["resourceVersion"].get(rv) != simdjson::SUCCESS || rv.empty()) {
    return absl::InvalidArgumentError("metadata.resourceVersion: required");
  }
  std::string_view next;
  if (auto error = metadata["continue"].get(next);
      error != simdjson::SUCCESS && error != simdjson::NO_SUCH_FIELD) {
    return absl::InvalidArgumentError("metadata.continue: must be a string");
  }
  simdjson::dom::element items_field;
  if (list["items"].get(items_field) == simdjson::SUCCESS && !items_field.is_null()) {
    simdjson::dom::array array;
    if (items_field.get(array) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError("items: must be an array");
    }
    for (simdjson::dom::element item : array) {
      on_item(item);
      ++page.items;
    }
  }
  page.resource_version = std::string(rv);
  page.continue_token = std::string(next);
  return page;
}

std::string QueryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string StatusMessage(std::string_view body) {
  simdjson::dom::parser parser;
  simdjson::dom::element status;
  std::string_view message;
  if (parser.parse(body.data(), body.size()).get(status) == simdjson::SUCCESS &&
      status["message"].get(message) == simdjson::SUCCESS) {
    return std::string(message);
  }
  return std::string(Prefix(body));
}

ListWatcher::ListWatcher(ResourceSpec resource, ListWatchOptions options, BearerToken& token,
                         WatchHandler& handler, base::OutageProbe* probe,
                         std::unique_ptr<HttpClient> client)
    : resource_(std::move(resource)),
      options_(options),
      token_(token),
      handler_(handler),
      probe_(probe),
      client_(std::move(client)),
      backoff_(options.backoff),
      rng_(std::random_device{}()) {}

absl::StatusOr<std::unique_ptr<ListWatcher>> ListWatcher::Create(
    ResourceSpec resource, ListWatchOptions options, const ClientConfig& config, BearerToken& token,
    WatchHandler& handler, base::OutageProbe* probe) {
  ASSIGN_OR_RETURN(std::unique_ptr<HttpClient> client, HttpClient::Create(config, token));
  return std::unique_ptr<ListWatcher>(
      new ListWatcher(std::move(resource), options, token, handler, probe, std::move(client)));
}

ListWatcher::~ListWatcher() {
  Stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void ListWatcher::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ListWatcher::Stop() {
  if (!stop_requested_.exchange(true)) {
    stop_.Notify();
    client_->Stop();
    if (probe_ != nullptr) {
      probe_->Wake();
    }
  }
}

void ListWatcher::Run() {
  bool relist = true;
  while (!stop_.HasBeenNotified()) {
    const Step step = relist ? List() : Watch();
    relist = step.relist;
    absl::Duration delay = step.delay;
    if (step.unreachable) {
      const base::OutageProbe::Wait wait = probe_->Await(probe_->Unreachable(), stop_requested_);
      if (wait == base::OutageProbe::Wait::kStopped) {
        break;
      }
      if (wait == base::OutageProbe::Wait::kRecovered) {
        // What was watched may have moved on in any way while the server was away (or it was
        // restarted): list again, at once, as every watcher of this server does now, so that
        // the source can hold back until all of them have.
        relist = true;
        backoff_.Reset();
        continue;
      }
      // The server answered the probe at once: only this connection failed. The usual backoff,
      // so that a server (or a proxy) that keeps dropping connections is not hammered.
      delay = backoff_.Next();
    }
    if (delay > absl::ZeroDuration() && stop_.WaitForNotificationWithTimeout(delay)) {
      break;
    }
  }
}

std::string ListWatcher::Target(std::string_view extra) const {
  std::string target = absl::StrCat(resource_.path, "?");
  if (!resource_.label_selector.empty()) {
    absl::StrAppend(&target, "labelSelector=", QueryEscape(resource_.label_selector), "&");
  }
  if (!resource_.field_selector.empty()) {
    absl::StrAppend(&target, "fieldSelector=", QueryEscape(resource_.field_selector), "&");
  }
  absl::StrAppend(&target, base::Absl(extra));
  return target;
}

void ListWatcher::Error(std::string_view reason) { handler_.OnError(reason); }

ListWatcher::Step ListWatcher::List() {
  handler_.OnListBegin();
  std::string continue_token;
  size_t items = 0;
  int pages = 0;
  do {
    // No resourceVersion: a consistent read of the newest state, which pages may follow.
    std::string extra = absl::StrCat("limit=", options_.page_size);
    if (!continue_token.empty()) {
      absl::StrAppend(&extra, "&continue=", QueryEscape(continue_token));
    }
    std::string body;
    absl::StatusOr<HttpResponse> result =
        client_->Get(Target(extra), options_.list_timeout, [&](std::string_view bytes) {
          if (body.size() + bytes.size() > options_.max_page_bytes) {
            return absl::ResourceExhaustedError(
                absl::StrCat("list page larger than ", options_.max_page_bytes, " bytes"));
          }
          body.append(bytes);
          return absl::OkStatus();
        });
    if (!result.ok()) {
      return RequestFailed("list", result.status(), /*relist=*/true);
    }
    if (result->status != 200) {
      // An expired continue token is a 410 too: the list starts over from its first page.
      return HttpFailed("list", *result, /*relist=*/true);
    }
    absl::StatusOr<ListPage> page = ParseListPage(
        parser_, body, [this](const simdjson::dom::element& item) { handler_.OnListItem(item); });
    if (!page.ok()) {
      LOG(ERROR) << "kube " << resource_.name << ": bad list response: " << page.status();
      Error("malformed_list");
      return Step{.relist = true, .delay = backoff_.Next()};
    }
    items += page->items;
    continue_token = std::move(page->continue_token);
    if (continue_token.empty()) {  // every page carries the snapshot's version
      resource_version_ = std::move(page->resource_version);
    }
    ++pages;
  } while (!continue_token.empty());
  handler_.OnListEnd();
  backoff_.Reset();
  unauthorized_streak_ = 0;
  LOG(INFO) << "kube " << resource_.name << ": listed " << items << " objects (" << pages
            << (pages == 1 ? " page" : " pages") << ") at resourceVersion " << resource_version_;
  return Step{};
}

ListWatcher::Step ListWatcher::Watch() {
  // timeoutSeconds in [min, 2*min).
  std::uniform_real_distribution<double> spread(1.0, 2.0);
  const absl::Duration timeout = absl::Seconds(
      std::max<int64_t>(1, absl::ToInt64Seconds(options_.min_watch_timeout * spread(rng_))));
  const std::string target = Target(
      absl::StrCat("watch=1&resourceVersion=", QueryEscape(resource_version_),
                   "&allowWatchBookmarks=true&timeoutSeconds=", absl::ToInt64Seconds(timeout)));
  VLOG(1) << "kube " << resource_.name << ": watching from resourceVersion " << resource_version_;
  LineSplitter lines(options_.max_event_bytes);
  StreamState stream;
  const base::MonoTime start = base::MonotonicNow();  // a wall-clock step must not count
  absl::StatusOr<HttpResponse> result =
      client_->Get(target, timeout + options_.watch_grace, [&](std::string_view bytes) {
        stream.answered = true;
        return lines.Feed(bytes, [&](std::string_view line) { return OnEventLine(line, stream); });
      });
  const bool healthy = stream.events > 0 || base::MonotonicNow() - start >= kHealthyWatch;
  if (healthy) {
    backoff_.Reset();
    unauthorized_streak_ = 0;
  }
  if (result.ok() && result->status == 200 && lines.pending() > 0) {
    LOG(WARNING) << "kube " << resource_.name << ": watch ended inside an event ("
                 << lines.pending() << " bytes dropped)";
  }
  return WatchEnded(result, stream, healthy);
}

ListWatcher::Step ListWatcher::WatchEnded(const absl::StatusOr<HttpResponse>& result,
                                          const StreamState& stream, bool healthy) {
  // A server that answers is back: the next retry need not wait out the backoff built up while
  // it was unreachable (an outage would otherwise delay the relist by up to its 30 s cap).
  // Overload answers (429, 5xx) keep backing off.
  if (stream.answered || (result.ok() && result->status != 429 && result->status < 500)) {
    backoff_.Reset();
  }
  if (result.ok() && result->status == 200) {
    // The server ended the watch (its timeout) or the stream closed cleanly: carry on from the
    // last resourceVersion seen.
    unauthorized_streak_ = 0;
    VLOG(1) << "kube " << resource_.name << ": watch ended after " << stream.events << " events";
    return Step{.relist = false, .delay = healthy ? absl::ZeroDuration() : backoff_.Next()};
  }
  if (result.ok()) {
    return HttpFailed("watch", *result, /*relist=*/false);
  }
  const absl::Status& status = result.status();
  if (status.code() == absl::StatusCode::kAborted && stream.error_code == 410) {
    LOG(INFO) << "kube " << resource_.name << ": resourceVersion " << resource_version_
              << " expired (" << stream.error << "); relisting now";
    Error("expired");
    return Step{.relist = true};  // the server answered: nothing to wait for
  }
  if (status.code() == absl::StatusCode::kAborted) {
    LOG(WARNING) << "kube " << resource_.name << ": watch error event " << stream.error_code << ": "
                 << stream.error << "; relisting";
    Error("watch_error");
    return Step{.relist = true, .delay = backoff_.Next()};
  }
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    // Re-watching would replay the same event; a list moves past it.
    LOG(ERROR) << "kube " << resource_.name << ": refused a " << status.message() << "; relisting";
    Error("oversized_event");
    return Step{.relist = true, .delay = backoff_.Next()};
  }
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    LOG(WARNING) << "kube " << resource_.name
                 << ": watch went silent past its timeout; re-watching (" << status.message()
                 << ")";
    Error("timeout");
    return Step{.relist = false, .delay = absl::ZeroDuration()};
  }
  return RequestFailed("watch", status, /*relist=*/false);
}

absl::Status ListWatcher::OnEventLine(std::string_view line, StreamState& stream) {
  absl::StatusOr<WatchEvent> event = DecodeWatchEvent(parser_, line);
  if (!event.ok()) {
    LOG(ERROR) << "kube " << resource_.name << ": skipping a watch event ("
               << event.status().message() << "): " << Prefix(line);
    Error("malformed_event");
    return absl::OkStatus();
  }
  switch (event->kind) {
    case WatchEvent::Kind::kError:
      stream.error_code = event->error_code;
      stream.error = std::string(event->error_message);
      return absl::AbortedError("ERROR event");
    case WatchEvent::Kind::kBookmark:
      handler_.OnBookmark();
      break;
    case WatchEvent::Kind::kObject:
      ++stream.events;
      handler_.OnWatchEvent(event->type, event->object);
      break;
  }
  if (!event->resource_version.empty()) {
    resource_version_ = std::string(event->resource_version);
  }
  return absl::OkStatus();
}

ListWatcher::Step ListWatcher::RequestFailed(std::string_view what, const absl::Status& status,
                                             bool relist) {
  if (status.code() == absl::StatusCode::kCancelled) {
    return Step{.relist = relist};  // stopping
  }
  const char* reason = "connection";
  if (probe_ != nullptr && (status.code() == absl::StatusCode::kUnavailable ||
                            status.code() == absl::StatusCode::kDeadlineExceeded)) {
    LOG(WARNING) << "kube " << resource_.name << ": " << what << " failed: " << status.message()
                 << "; retrying when the API server answers";
    Error(status.code() == absl::StatusCode::kDeadlineExceeded ? "timeout" : reason);
    return Step{.relist = relist, .unreachable = true};
  }
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      reason = "timeout";
      break;
    case absl::StatusCode::kResourceExhausted:
      reason = "oversized_list";
      break;
    case absl::StatusCode::kFailedPrecondition:
      reason = "tls";
      break;
    default:
      break;
  }
  const absl::Duration delay = backoff_.Next();
  LOG(WARNING) << "kube " << resource_.name << ": " << what << " failed: " << status.message()
               << "; retrying in "
               << absl::FormatDuration(absl::Trunc(delay, absl::Milliseconds(1)));
  Error(reason);
  return Step{.relist = relist, .delay = delay};
}

ListWatcher::Step ListWatcher::HttpFailed(std::string_view what, const HttpResponse& response,
                                          bool relist) {
  const std::string message = StatusMessage(response.error_body);
  std::string_view reason = "http_error";
  absl::Duration delay;
  switch (response.status) {
    case 401:
      // Projected tokens rotate: re-read the file and try again at once, then back off.
      reason = "unauthorized";
      token_.Invalidate();
      delay = unauthorized_streak_++ == 0 ? absl::ZeroDuration() : backoff_.Next();
      break;
    case 403:
      reason = "forbidden";  // RBAC: see deploy/rbac.yaml
      delay = backoff_.Next();
      break;
    case 410:
      // Too old a resourceVersion (watch) or continue token (list): start over at once.
      reason = "expired";
      relist = true;
      delay = absl::ZeroDuration();
      break;
    case 429:
      reason = "throttled";
      delay = response.retry_after > absl::ZeroDuration() ? response.retry_after : backoff_.Next();
      break;
    default:
      if (response.status >= 500) {
        reason = "server_error";
        delay =
            response.retry_after > absl::ZeroDuration() ? response.retry_after : backoff_.Next();
      } else {
        delay = backoff_.Next();
      }
  }
  LOG(WARNING) << "kube " << resource_.name << ": " << what << ": HTTP " << response.status
               << (message.empty() ? "" : ": ") << message << "; "
               << (relist ? "relisting" : "re-watching")
               << (delay == absl::ZeroDuration()
                       ? std::string(" now")
                       : " in " + absl::FormatDuration(absl::Trunc(delay, absl::Milliseconds(1))));
  Error(reason);
  return Step{.relist = relist, .delay = delay};
}

}  // namespace sluice::kube
