// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "lib/base/backoff.h"
#include "lib/base/outage_probe.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/client_config.h"
#include "lib/kube/http_client.h"
#include "lib/kube/line_splitter.h"
#include "lib/kube/watch_event.h"
#include "simdjson.h"

namespace sluice::kube {

// Receives one resource's objects from a ListWatcher, on its thread, in order. Elements are
// valid only during the call.
class WatchHandler {
 public:
  virtual ~WatchHandler() = default;
  // A full list starts; items follow, then OnListEnd. A list that fails partway is started over
  // with another OnListBegin, so drop what was collected.
  virtual void OnListBegin() = 0;
  virtual void OnListItem(const simdjson::dom::element& object) = 0;
  // The items since OnListBegin are the resource's complete state: anything not among them is
  // gone (deleted while no watch was running, after a 410).
  virtual void OnListEnd() = 0;
  virtual void OnWatchEvent(EventType type, const simdjson::dom::element& object) = 0;
  // The server confirmed that nothing changed up to a newer resourceVersion.
  virtual void OnBookmark() = 0;
  // A failed request or a bad event, already logged; `reason` is a metric label such as
  // "connection", "unauthorized", "expired", "malformed_event".
  virtual void OnError(std::string_view reason) = 0;
};

// What to list and watch: a collection across all namespaces.
struct ResourceSpec {
  std::string name;  // "services", for logs
  std::string path;  // "/api/v1/services"
  std::string label_selector;
  std::string field_selector;
};

struct ListWatchOptions {
  int64_t page_size = 500;  // client-go's default page
  // Each watch asks the server to end it after a random time in [min, 2*min) (as client-go
  // does), so that watches spread over API server replicas and never outlive a rotated token
  // by much. The client gives up on a stream `watch_grace` after that (a silently dead peer).
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration watch_grace = absl::Seconds(30);
  absl::Duration list_timeout = absl::Minutes(1);
  // The largest event line (an object) and list page accepted. A Service or EndpointSlice is
  // bounded by etcd's 1.5 MiB request limit; 16 MiB leaves room for bigger objects while
  // bounding memory. A bigger line is refused and the resource relisted.
  size_t max_event_bytes = 16 << 20;
  size_t max_page_bytes = 256 << 20;
  base::Backoff::Options backoff;
};

// Keeps one resource in sync with the API server on its own thread: a paginated list
// (limit/continue, one snapshot), then a watch from the list's resourceVersion with bookmarks,
// re-watching from the last resourceVersion seen whenever a watch ends or the connection
// drops. 410 Gone (an HTTP status or an in-stream ERROR event) relists. 429 waits Retry-After;
// 5xx backs off with jitter; 401 re-reads the token file. A server that cannot be reached
// (refused, reset, timed out) is waited for through the OutageProbe that all watchers of that
// server share, which finds it back within its short interval whatever the outage's length;
// after an outage the resource is listed again at once. A connection that failed while the
// server answers the probe (a dropped watch) is retried after the backoff, from the last
// resourceVersion. Without a probe, connection errors back off like 5xx.
// Thread: its own (Start, Stop and the destructor: the owner's; Stop is thread-safe).
class ListWatcher final {
 public:
  // `token`, `handler` and `probe` (optional) must outlive the watcher.
  static absl::StatusOr<std::unique_ptr<ListWatcher>> Create(
      ResourceSpec resource, ListWatchOptions options, const ClientConfig& config,
      BearerToken& token, WatchHandler& handler, base::OutageProbe* probe = nullptr);
  // Stops and joins the thread.
  ~ListWatcher();

  void Start();
  // Interrupts any request or wait at once; the thread then ends. Thread-safe.
  void Stop();

 private:
  // What the loop does next.
  struct Step {
    bool relist = false;
    absl::Duration delay = absl::ZeroDuration();
    bool unreachable = false;  // wait for the probe instead of `delay`
  };
  struct StreamState {
    bool answered = false;  // the server sent a 200 and started the stream
    int64_t events = 0;
    int64_t error_code = 0;  // of an in-stream ERROR event
    std::string error;
  };

  ListWatcher(ResourceSpec resource, ListWatchOptions options, BearerToken& token,
              WatchHandler& handler, base::OutageProbe* probe, std::unique_ptr<HttpClient> client);
  void Run();
  Step List();
  Step Watch();
  Step WatchEnded(const absl::StatusOr<HttpResponse>& result, const StreamState& stream,
                  bool healthy);
  absl::Status OnEventLine(std::string_view line, StreamState& stream);
  Step RequestFailed(std::string_view what, const absl::Status& status, bool relist);
  Step HttpFailed(std::string_view what, const HttpResponse& response, bool relist);
  void Error(std::string_view reason);
  std::string Target(std::string_view extra) const;

  const ResourceSpec resource_;
  const ListWatchOptions options_;
  BearerToken& token_;
  WatchHandler& handler_;
  base::OutageProbe* const probe_;
  std::unique_ptr<HttpClient> client_;
  absl::Notification stop_;
  std::atomic<bool> stop_requested_{false};
  std::thread thread_;

  // Thread: the watcher's.
  base::Backoff backoff_;
  std::mt19937_64 rng_;
  simdjson::dom::parser parser_;
  std::string resource_version_;
  int unauthorized_streak_ = 0;
};

// One page of a list response (a *List object), as an API server sends it.
struct ListPage {
  std::string resource_version;  // metadata.resourceVersion: required, the snapshot's version
  std::string continue_token;    // metadata.continue: "" on the last page
  size_t items = 0;
};
// Parses `body` and hands each of its items to `on_item`, in order; the elements are valid only
// during the call. An error means the page is unusable (the list starts over), though items may
// have been handed on already.
absl::StatusOr<ListPage> ParseListPage(
    simdjson::dom::parser& parser, std::string_view body,
    absl::FunctionRef<void(const simdjson::dom::element&)> on_item);

// Percent-encodes a query parameter value (RFC 3986 unreserved characters pass).
std::string QueryEscape(std::string_view value);

// The "message" of a metav1.Status body, or the body's start when it is not one.
std::string StatusMessage(std::string_view body);

}  // namespace sluice::kube
