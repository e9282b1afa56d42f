// SPDX-License-Identifier: Apache-2.0
// The real KubeSource (and under it kube::ListWatcher, HttpClient over libcurl) against a test
// API server that follows the documented list/watch protocol (fake_apiserver.py), checked
// through the mux it feeds, the requests the server logged and the source's metrics.
// Unprivileged: everything is on 127.0.0.1.
#include "agent/control/sources/kube_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "lib/base/metrics.h"

#include "agent/control/config/mux.h"
#include "tests/integration/kube/fake_apiserver.h"
#include "tests/testutil/process.h"

namespace sluice::testing {
namespace {

using sources::KubeSource;
using testutil::WaitFor;

constexpr char kServices[] = "/api/v1/services";
constexpr char kSlices[] = "/apis/discovery.k8s.io/v1/endpointslices";
constexpr absl::Duration kWait = absl::Seconds(15);

// One KubeSource feeding its own mux, with its own metrics.
struct Harness {
  base::Registry registry;
  sources::SourceMetricFamilies families{registry};
  config::Mux mux;
  config::SourceChannel* channel = mux.Channel("kube");
  std::unique_ptr<KubeSource> source;  // last: stops before the rest goes

  absl::Status Start(KubeSource::Options options) {
    auto s = KubeSource::Create(std::move(options), channel, families);
    if (!s.ok()) {
      return s.status();
    }
    source = std::move(*s);
    return absl::OkStatus();
  }
  std::set<std::string> Services() const {
    std::set<std::string> out;
    for (const auto& s : mux.Services()) {
      out.insert(s->meta.id.ToString());
    }
    return out;
  }
  std::set<std::string> Slices() const {
    std::set<std::string> out;
    for (const auto& s : mux.EndpointSlices()) {
      out.insert(s->meta.id.ToString());
    }
    return out;
  }
  config::ServicePtr Service(const std::string& id) const {
    for (const auto& s : mux.Services()) {
      if (s->meta.id.ToString() == id) {
        return s;
      }
    }
    return nullptr;
  }
  // The value of a fully labelled series, 0 when absent.
  double Metric(const std::string& series) const {
    std::istringstream in(registry.Render());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(series + " ", 0) == 0) {
        return std::stod(line.substr(series.size() + 1));
      }
    }
    return 0;
  }
  double Errors(const std::string& reason) const {
    return Metric(
        absl::StrCat("sluice_source_errors_total{source=\"kube\",reason=\"", reason, "\"}"));
  }
};

class KubeSourceTest : public ::testing::Test {
 protected:
  void StartApi(FakeApiServer::Options options = {}) {
    api_ = FakeApiServer::Start(options);
    ASSERT_NE(api_, nullptr);
  }
  // Test-sized periods: small pages, quick retries.
  KubeSource::Options Defaults(const std::string& kubeconfig) {
    KubeSource::Options o;
    o.kubeconfig = kubeconfig;
    o.node_name = "node1";
    o.watch.page_size = 2;
    o.watch.min_watch_timeout = absl::Seconds(60);
    o.watch.watch_grace = absl::Seconds(2);
    o.watch.list_timeout = absl::Seconds(10);
    o.watch.backoff = {.initial = absl::Milliseconds(100), .max = absl::Seconds(1)};
    return o;
  }
  void Start(KubeSource::Options options) {
    ASSERT_TRUE(h_.Start(std::move(options)).ok());
    ASSERT_TRUE(WaitFor([&] { return h_.mux.AllSynced(); }, kWait)) << api_->Output();
  }
  void StartPlain() { Start(Defaults(api_->WriteKubeconfig({.ca = ""}))); }
  void PutService(const std::string& name, const std::string& ip, int port = 80,
                  const std::string& labels = "") {
    api_->Put("services", ServiceJson("ns", name, ip, port, labels));
  }
  std::vector<ApiRequest> Watches(const std::string& path) {
    std::vector<ApiRequest> out;
    for (auto& r : api_->Requests(path)) {
      if (r.watch()) {
        out.push_back(std::move(r));
      }
    }
    return out;
  }
  std::vector<ApiRequest> Lists(const std::string& path) {
    std::vector<ApiRequest> out;
    for (auto& r : api_->Requests(path)) {
      if (!r.watch()) {
        out.push_back(std::move(r));
      }
    }
    return out;
  }
  bool HasService(const std::string& id) { return h_.Services().contains(id); }
  bool Eventually(absl::AnyInvocable<bool()> cond) {
    return WaitFor([&] { return cond(); }, kWait);
  }

  std::unique_ptr<FakeApiServer> api_;
  Harness h_;
};

TEST_F(KubeSourceTest, ListsEveryPageThenWatchesFromTheListVersion) {
  StartApi();
  std::string rv;
  for (int i = 0; i < 5; ++i) {
    PutService(absl::StrCat("s", i), absl::StrCat("10.96.0.", i + 1));
    rv = api_->Put("endpointslices",
                   SliceJson("ns", absl::StrCat("s", i), absl::StrCat("s", i, "-1"),
                             {absl::StrCat("10.0.0.", i + 1)}, 8080));
  }
  StartPlain();
  EXPECT_EQ(h_.Services().size(), 5u);
  EXPECT_EQ(h_.Slices().size(), 5u);

  // Five objects in pages of two: three requests, the later ones continuing the first.
  std::vector<ApiRequest> lists = Lists(kServices);
  ASSERT_EQ(lists.size(), 3u);
  EXPECT_FALSE(lists[0].query.contains("continue"));
  EXPECT_FALSE(lists[0].query.contains("resourceVersion"));  // a consistent read
  EXPECT_FALSE(lists[1].query["continue"].empty());
  EXPECT_FALSE(lists[2].query["continue"].empty());
  for (auto& r : lists) {
    EXPECT_EQ(r.query["limit"], "2");
    EXPECT_EQ(r.query["labelSelector"],
              "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless");
  }
  ASSERT_TRUE(Eventually([&] { return !Watches(kServices).empty(); }));
  ApiRequest watch = Watches(kServices)[0];
  EXPECT_EQ(watch.query["resourceVersion"], rv);
  EXPECT_EQ(watch.query["allowWatchBookmarks"], "true");
  EXPECT_EQ(watch.query["labelSelector"], lists[0].query["labelSelector"]);
  int timeout = std::stoi(watch.query["timeoutSeconds"]);
  EXPECT_GE(timeout, 60);
  EXPECT_LT(timeout, 120);

  // Events: add, update, delete of both kinds.
  PutService("s9", "10.96.0.99");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/s9"); }));
  PutService("s0", "10.96.0.1", 81);
  ASSERT_TRUE(Eventually([&] { return h_.Service("ns/s0")->ports[0].port == 81; }));
  api_->Delete("services", "ns", "s1");
  api_->Delete("endpointslices", "ns", "s1-1");
  ASSERT_TRUE(Eventually([&] { return !HasService("ns/s1") && h_.Slices().size() == 4; }));
  EXPECT_EQ(h_.Metric(R"(sluice_source_events_total{source="kube",type="ADDED"})"), 1);
  EXPECT_EQ(h_.Metric(R"(sluice_source_events_total{source="kube",type="MODIFIED"})"), 1);
  EXPECT_EQ(h_.Metric(R"(sluice_source_events_total{source="kube",type="DELETED"})"), 2);
  EXPECT_EQ(h_.Metric(R"(sluice_source_objects{source="kube",kind="Service"})"), 5);
  EXPECT_EQ(h_.Metric(R"(sluice_source_objects{source="kube",kind="EndpointSlice"})"), 4);
  EXPECT_EQ(h_.Metric(R"(sluice_source_relists_total{source="kube"})"), 0);
  EXPECT_GT(h_.Metric(R"(sluice_source_last_sync_timestamp_seconds{source="kube"})"), 1e9);
}

TEST_F(KubeSourceTest, TheSelectorLeavesOutOtherProxiesAndHeadlessSlices) {
  StartApi();
  PutService("mine", "10.96.0.1");
  PutService("other", "10.96.0.2", 80, R"("service.kubernetes.io/service-proxy-name":"other")");
  PutService("ours", "10.96.0.3", 80, R"("service.kubernetes.io/service-proxy-name":"sluice")");
  api_->Put("endpointslices", SliceJson("ns", "mine", "mine-1", {"10.0.0.1"}, 80));
  api_->Put("endpointslices", SliceJson("ns", "db", "db-1", {"10.0.0.2"}, 80,
                                        R"("service.kubernetes.io/headless":"")"));
  api_->Put("endpointslices", SliceJson("ns", "ours", "ours-1", {"10.0.0.3"}, 80,
                                        R"("service.kubernetes.io/service-proxy-name":"sluice")"));
  StartPlain();
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/mine"}));
  EXPECT_EQ(h_.Slices(), (std::set<std::string>{"ns/mine-1"}));

  // With --service-proxy-name, only objects carrying that name.
  Harness named;
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.service_proxy_name = "sluice";
  ASSERT_TRUE(named.Start(std::move(o)).ok());
  ASSERT_TRUE(Eventually([&] { return named.mux.AllSynced(); }));
  EXPECT_EQ(named.Services(), (std::set<std::string>{"ns/ours"}));
  EXPECT_EQ(named.Slices(), (std::set<std::string>{"ns/ours-1"}));
  EXPECT_EQ(Lists(kServices).back().query["labelSelector"],
            "service.kubernetes.io/service-proxy-name=sluice,!service.kubernetes.io/headless");
}

TEST_F(KubeSourceTest, ABookmarkMovesTheVersionAWatchResumesFrom) {
  StartApi();
  PutService("a", "10.96.0.1");
  StartPlain();
  ASSERT_TRUE(Eventually([&] { return Watches(kServices).size() == 1; }));
  api_->Control(R"({"op":"bump"})");
  api_->Put("endpointslices", SliceJson("ns", "x", "x-1", {"10.0.0.1"}, 80));
  const std::string reply = api_->Control(R"({"op":"bookmark","resource":"services"})");
  ASSERT_TRUE(Eventually([&] {
    return h_.Metric(R"(sluice_source_events_total{source="kube",type="BOOKMARK"})") == 1;
  }));
  api_->Control(R"({"op":"close_watches","resource":"services"})");
  ASSERT_TRUE(Eventually([&] { return Watches(kServices).size() == 2; }));
  EXPECT_NE(reply.find(Watches(kServices)[1].query["resourceVersion"]), std::string::npos) << reply;
  EXPECT_EQ(Lists(kServices).size(), 1u);  // resumed, not relisted
}

// A watch from a compacted resourceVersion: 410 as the HTTP status, as an ERROR event at the
// start of the stream, or as an ERROR event on a watch that was running.
class ExpiredTest : public KubeSourceTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ExpiredTest, RelistsAndDeletesWhatVanished) {
  const std::string mode = GetParam();
  StartApi();
  PutService("a", "10.96.0.1");
  PutService("b", "10.96.0.2");
  api_->Put("endpointslices", SliceJson("ns", "a", "a-1", {"10.0.0.1"}, 80));
  StartPlain();
  ASSERT_TRUE(Eventually([&] { return Watches(kServices).size() == 1; }));
  // Changes the agent never sees as events, then the history is gone.
  api_->Control(R"({"op":"hold","value":true})");
  api_->Delete("services", "ns", "a");
  api_->Delete("endpointslices", "ns", "a-1");
  PutService("c", "10.96.0.3");
  api_->Control(R"({"op":"compact"})");
  if (mode != "active") {
    api_->Control(absl::StrCat(R"({"op":"gone_mode","value":")", mode, R"("})"));
    api_->Control(R"({"op":"close_watches"})");
  }
  api_->Control(R"({"op":"hold","value":false})");
  ASSERT_TRUE(Eventually([&] {
    return h_.Services() == std::set<std::string>{"ns/b", "ns/c"} && h_.Slices().empty();
  })) << api_->Output();
  EXPECT_GE(h_.Metric(R"(sluice_source_relists_total{source="kube"})"), 2);  // both kinds
  EXPECT_GE(h_.Errors("expired"), 2);
  // The relist is a fresh consistent list; the next watch starts from its version.
  std::vector<ApiRequest> lists = Lists(kServices);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_FALSE(lists[1].query.contains("continue"));
  ASSERT_TRUE(Eventually([&] {
    auto w = Watches(kServices);
    return !w.empty() && w.back().status == 200 && w.back().query["resourceVersion"] != "" &&
           std::stoi(w.back().query["resourceVersion"]) >= 104;
  }));
}

INSTANTIATE_TEST_SUITE_P(Modes, ExpiredTest, ::testing::Values("http", "stream", "active"));

TEST_F(KubeSourceTest, AnExpiredContinueTokenStartsTheListOver) {
  StartApi();
  for (int i = 0; i < 5; ++i) {
    PutService(absl::StrCat("s", i), absl::StrCat("10.96.0.", i + 1));
  }
  // The second page's request finds its snapshot compacted away.
  api_->Control(R"({"op":"fault","verb":"list","resource":"services","skip":1,"status":410,
                   "reason":"Expired","message":"continue token too old"})");
  StartPlain();
  EXPECT_EQ(h_.Services().size(), 5u);
  EXPECT_EQ(h_.Errors("expired"), 1);
  std::vector<ApiRequest> lists = Lists(kServices);
  ASSERT_EQ(lists.size(), 5u);  // page 1, expired page 2, then pages 1-3 again
  EXPECT_EQ(lists[1].status, 410);
  EXPECT_FALSE(lists[1].query["continue"].empty());
  EXPECT_FALSE(lists[2].query.contains("continue"));
}

TEST_F(KubeSourceTest, WatchesThatEndAreResumedFromTheLastVersionSeen) {
  StartApi();
  PutService("a", "10.96.0.1");
  StartPlain();
  const std::string rv_b = api_->Put("services", ServiceJson("ns", "b", "10.96.0.2", 80));
  ASSERT_TRUE(Eventually([&] { return HasService("ns/b"); }));
  // A clean end (the server's timeout, a restart) and a connection dropped mid-stream.
  api_->Control(R"({"op":"close_watches","mode":"clean"})");
  PutService("c", "10.96.0.3");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/c"); }));
  api_->Control(R"({"op":"close_watches","mode":"abrupt"})");
  PutService("d", "10.96.0.4");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/d"); }));
  std::vector<ApiRequest> watches = Watches(kServices);
  ASSERT_GE(watches.size(), 3u);
  EXPECT_EQ(watches[1].query["resourceVersion"], rv_b);
  EXPECT_EQ(Lists(kServices).size(), 1u);
  EXPECT_EQ(h_.Metric(R"(sluice_source_relists_total{source="kube"})"), 0);
}

// Reconnects that are reset; then the first answer from the server is a "too old
// resourceVersion", and the relist it asks for happens at once, not a backoff later.
TEST_F(KubeSourceTest, AnAnswerAfterAnOutageRelistsAtOnce) {
  StartApi();
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  // Jitter 0.5-1: after three failures the next delay is 2-4 s, far above the bound below.
  o.watch.backoff = {.initial = absl::Milliseconds(500), .max = absl::Seconds(4)};
  Start(std::move(o));
  // The watch drops, two retries are reset, and meanwhile the history moves past our
  // resourceVersion: the first watch the server answers is an ERROR 410 event.
  api_->Control(R"({"op":"gone_mode","value":"stream"})");
  api_->Control(R"({"op":"fault","verb":"watch","resource":"services","action":"reset",
                   "count":2})");
  api_->Control(R"({"op":"close_watches","mode":"abrupt","resource":"services"})");
  PutService("b", "10.96.0.2");
  api_->Control(R"({"op":"compact"})");
  ASSERT_TRUE(WaitFor([&] { return HasService("ns/b"); }, absl::Seconds(30)));
  std::vector<ApiRequest> all = api_->Requests(kServices);
  // The watch right before the relist is the expired one.
  auto relist = std::find_if(all.rbegin(), all.rend(),
                             [](const ApiRequest& r) { return !r.watch() && r.status == 200; });
  ASSERT_NE(relist, all.rend());
  auto expired = std::find_if(relist, all.rend(), [](const ApiRequest& r) { return r.watch(); });
  ASSERT_NE(expired, all.rend());
  EXPECT_EQ(expired->status, 200);  // answered (the 410 comes in the stream)
  // Below the 2 s the backoff would wait at least; generous for a loaded machine.
  EXPECT_LT(relist->time - expired->time, 1.5) << "the relist waited out the outage's backoff";
  EXPECT_GE(h_.Errors("connection"), 2);
  EXPECT_GE(h_.Errors("expired"), 1);
}

// When each add and change of the merged view arrived, by namespace/name ("service ns/a").
class UpdateLog final : public config::ServiceHandler,
                        public config::EndpointSliceHandler,
                        public config::BatchHandler {
 public:
  void OnServiceUpdate(const config::ServicePtr&, const config::ServicePtr& cur) override {
    Record(cur, "service ");
  }
  void OnServicesSynced() override {}
  void OnEndpointSliceUpdate(const config::EndpointSlicePtr&,
                             const config::EndpointSlicePtr& cur) override {
    Record(cur, "slice ");
  }
  void OnEndpointSlicesSynced() override {}
  void OnBatchBegin() override {
    absl::MutexLock lock(&mu_);
    in_batch_ = true;
    ++unit_;
  }
  void OnBatchEnd() override {
    absl::MutexLock lock(&mu_);
    in_batch_ = false;
  }
  // The update (or batch of updates) in which `what` first arrived; nullopt if it has not.
  std::optional<int> Unit(const std::string& what) const {
    absl::MutexLock lock(&mu_);
    auto it = first_.find(what);
    return it == first_.end() ? std::nullopt : std::optional<int>(it->second);
  }

 private:
  template <typename T>
  void Record(const T& cur, const char* kind) {
    if (cur) {
      absl::MutexLock lock(&mu_);
      first_.emplace(kind + cur->meta.id.ToString(), in_batch_ ? unit_ : ++unit_);
    }
  }
  mutable absl::Mutex mu_;
  bool in_batch_ ABSL_GUARDED_BY(mu_) = false;
  int unit_ ABSL_GUARDED_BY(mu_) = 0;  // a batch, or an update outside any, counts one
  std::map<std::string, int> first_ ABSL_GUARDED_BY(mu_);
};

// kube-apiserver stops (connections refused, watches dropped), then starts again. The retry
// backoff here is so long (2-5 min for the first retry) that only the shared probe can bring
// the watchers back within the bound: the outage's length is irrelevant to it (the unit tests
// of base::OutageProbe drive 30 s and 2 min outages on a fake clock).
TEST_F(KubeSourceTest, AfterAnOutageTheProbeFindsTheServerAndBothKindsComeBackTogether) {
  StartApi();
  PutService("a", "10.96.0.1");
  api_->Put("endpointslices", SliceJson("ns", "a", "a-1", {"10.0.0.1"}, 80));
  UpdateLog log;
  h_.mux.AddServiceHandler(&log);
  h_.mux.AddEndpointSliceHandler(&log);
  h_.mux.AddBatchHandler(&log);
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.watch.backoff = {.initial = absl::Minutes(2), .max = absl::Minutes(5)};
  Start(std::move(o));
  const double connection_errors = h_.Errors("connection");

  api_->Control(R"({"op":"outage","value":true})");
  // Both watches dropped and found the server gone.
  ASSERT_TRUE(Eventually([&] { return h_.Errors("connection") >= connection_errors + 2; }));
  // Created while the server is away: the EndpointSlice controller's slice is there at once.
  PutService("b", "10.96.0.2");
  api_->Put("endpointslices", SliceJson("ns", "b", "b-1", {"10.0.0.2"}, 80));
  // After the restart the slices are listed a second later than the services (the server asks
  // for that: 429 with Retry-After 1), which must neither hold the slices back longer nor let
  // service b be applied without its slice.
  api_->Control(R"({"op":"fault","verb":"list","resource":"endpointslices","status":429,
                   "retry_after":1})");
  // An outage is what a probe finds: a server back before the first probe is a dropped
  // connection, and nothing is held.
  ASSERT_TRUE(Eventually([&] { return h_.Errors("unreachable") >= 1; }));
  api_->Control(R"({"op":"outage","value":false})");
  const absl::Time restarted = absl::Now();
  // A change made once the server answers.
  PutService("a", "10.96.0.1", 81);

  // The probe's interval (0.5 s), two lists and the Retry-After second here; 2 min or more
  // with a backoff. The bound leaves room for a loaded machine and fails only without the probe.
  ASSERT_TRUE(WaitFor(
      [&] {
        return log.Unit("service ns/b") && log.Unit("slice ns/b-1") &&
               h_.Service("ns/a")->ports[0].port == 81;
      },
      absl::Minutes(1)))
      << api_->Output();
  EXPECT_LT(absl::Now() - restarted, absl::Minutes(1));
  // Applied together: one release of what was held, as one batch.
  EXPECT_EQ(*log.Unit("service ns/b"), *log.Unit("slice ns/b-1"));
  // The throttled list waited as asked.
  std::vector<ApiRequest> slice_lists = Lists(kSlices);
  auto throttled = std::find_if(slice_lists.begin(), slice_lists.end(),
                                [](const ApiRequest& r) { return r.status == 429; });
  ASSERT_NE(throttled, slice_lists.end());
  ASSERT_NE(throttled + 1, slice_lists.end());
  EXPECT_GE((throttled + 1)->time - throttled->time, 1.0 - 0.05);
  // Each kind was listed again after the outage, not re-watched from before it.
  EXPECT_GE(h_.Metric(R"(sluice_source_relists_total{source="kube"})"), 2);
  EXPECT_GE(api_->Requests("/version").size(), 1u);
}

// After an outage, EndpointSlices that cannot be listed (RBAC taken away meanwhile) hold the
// Services back for relist_hold, not for as long as the slices fail.
TEST_F(KubeSourceTest, AfterAnOutageAKindThatCannotBeListedHoldsTheOtherBackOnlyBriefly) {
  StartApi();
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.relist_hold = absl::Seconds(1);
  Start(std::move(o));
  const double connection_errors = h_.Errors("connection");
  api_->Control(R"({"op":"outage","value":true})");
  ASSERT_TRUE(Eventually([&] { return h_.Errors("connection") >= connection_errors + 2; }));
  api_->Control(R"({"op":"fault","verb":"list","resource":"endpointslices","status":403,
                   "count":1000})");
  PutService("b", "10.96.0.2");
  ASSERT_TRUE(Eventually([&] { return h_.Errors("unreachable") >= 1; }));  // an outage
  const absl::Time restarting = absl::Now();  // before the server can answer the probe
  api_->Control(R"({"op":"outage","value":false})");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/b"); })) << api_->Output();
  // Held for the second, then let through (a wall-clock step aside).
  EXPECT_GE(absl::Now() - restarting, absl::Milliseconds(990));
  EXPECT_GE(h_.Errors("forbidden"), 1);
}

TEST_F(KubeSourceTest, ASilentWatchIsAbandonedAfterItsDeadline) {
  StartApi();
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.watch.min_watch_timeout = absl::Seconds(1);
  o.watch.watch_grace = absl::Seconds(1);
  // The next services watch gets its headers, then nothing, past its timeoutSeconds.
  api_->Control(R"({"op":"fault","verb":"watch","resource":"services","action":"hang"})");
  Start(std::move(o));
  PutService("b", "10.96.0.2");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/b"); }));
  EXPECT_EQ(h_.Errors("timeout"), 1);
  std::vector<ApiRequest> watches = Watches(kServices);
  ASSERT_GE(watches.size(), 2u);
  const double waited = watches[1].time - watches[0].time;
  const int timeout = std::stoi(watches[0].query["timeoutSeconds"]);
  EXPECT_GE(waited, timeout + 1 - 0.2);
  EXPECT_LT(waited, timeout + 1 + 5);  // not much later (generous for a loaded machine)
}

TEST_F(KubeSourceTest, ThrottlingWaitsRetryAfterAndErrorsBackOff) {
  StartApi();
  PutService("a", "10.96.0.1");
  api_->Put("endpointslices", SliceJson("ns", "a", "a-1", {"10.0.0.1"}, 80));
  api_->Control(R"({"op":"fault","verb":"list","resource":"services","status":429,
                   "retry_after":2})");
  api_->Control(R"({"op":"fault","verb":"list","resource":"endpointslices","status":503,
                   "count":3})");
  // Twice: libcurl retries a request once by itself when a reused connection drops.
  api_->Control(R"({"op":"fault","verb":"watch","resource":"services","action":"reset",
                   "count":2})");
  Start(Defaults(api_->WriteKubeconfig({.ca = ""})));
  std::vector<ApiRequest> lists = Lists(kServices);
  ASSERT_EQ(lists.size(), 2u);
  EXPECT_EQ(lists[0].status, 429);
  EXPECT_GE(lists[1].time - lists[0].time, 2.0 - 0.05);
  std::vector<ApiRequest> slice_lists = Lists(kSlices);
  ASSERT_EQ(slice_lists.size(), 4u);
  EXPECT_EQ(slice_lists[3].status, 200);
  EXPECT_EQ(h_.Errors("throttled"), 1);
  EXPECT_EQ(h_.Errors("server_error"), 3);
  // The reset watch is retried from the list's version; events flow again.
  PutService("b", "10.96.0.2");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/b"); }));
  EXPECT_GE(h_.Errors("connection"), 1);
  EXPECT_EQ(Lists(kServices).size(), 2u);
}

TEST_F(KubeSourceTest, A401ReReadsTheRotatedToken) {
  StartApi();
  const std::string token_file = api_->dir() + "/token";
  std::ofstream(token_file) << "t1\n";
  api_->Control(R"({"op":"auth","tokens":["t1"]})");
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.token_file = token_file, .ca = ""}));
  o.token_reload_period = absl::Hours(1);  // only the 401 makes it re-read
  Start(std::move(o));
  for (const auto& r : api_->Requests()) {
    EXPECT_EQ(r.authorization, "Bearer t1");
  }
  // kubelet rotates the projected token; the server stops accepting the old one.
  std::ofstream(token_file) << "t2\n";
  api_->Control(R"({"op":"auth","tokens":["t2"]})");
  api_->Control(R"({"op":"close_watches"})");
  PutService("b", "10.96.0.2");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/b"); }));
  EXPECT_GE(h_.Errors("unauthorized"), 1);
  EXPECT_EQ(api_->Requests().back().authorization, "Bearer t2");
  EXPECT_EQ(Lists(kServices).size(), 1u);
}

TEST_F(KubeSourceTest, TheTokenFileIsReReadPeriodically) {
  StartApi();
  const std::string token_file = api_->dir() + "/token";
  std::ofstream(token_file) << "t1";
  api_->Control(R"({"op":"auth","tokens":["t1","t2"]})");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.token_file = token_file, .ca = ""}));
  o.token_reload_period = absl::Milliseconds(200);
  Start(std::move(o));
  std::ofstream(token_file) << "t2";
  absl::SleepFor(absl::Milliseconds(300));
  api_->Control(R"({"op":"close_watches"})");
  ASSERT_TRUE(Eventually([&] { return api_->Requests().back().authorization == "Bearer t2"; }));
  for (const auto& r : api_->Requests()) {
    EXPECT_NE(r.status, 401);
  }
}

TEST_F(KubeSourceTest, TlsWithTheTestCaAndAClientCertificate) {
  StartApi({.tls = true, .require_client_cert = true});
  PutService("a", "10.96.0.1");
  Start(Defaults(api_->WriteKubeconfig({.client_cert = true, .ca = "data"})));
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/a"}));

  Harness file_ca;
  ASSERT_TRUE(
      file_ca.Start(Defaults(api_->WriteKubeconfig({.client_cert = true, .ca = "file"}))).ok());
  ASSERT_TRUE(Eventually([&] { return file_ca.mux.AllSynced(); }));

  // A server certificate from another CA, or no client certificate: never synced.
  Harness wrong_ca;
  ASSERT_TRUE(
      wrong_ca.Start(Defaults(api_->WriteKubeconfig({.client_cert = true, .ca = "other"}))).ok());
  Harness no_cert;
  ASSERT_TRUE(no_cert.Start(Defaults(api_->WriteKubeconfig({.ca = "data"}))).ok());
  // A refused client certificate surfaces as a TLS alert at the handshake or the first read.
  ASSERT_TRUE(Eventually([&] {
    return wrong_ca.Errors("tls") >= 2 && no_cert.Errors("tls") + no_cert.Errors("connection") >= 2;
  }));
  EXPECT_FALSE(wrong_ca.mux.AllSynced());
  EXPECT_FALSE(no_cert.mux.AllSynced());
}

TEST_F(KubeSourceTest, InsecureSkipVerifyOnlyWhenTheKubeconfigSaysSo) {
  StartApi({.tls = true});
  PutService("a", "10.96.0.1");
  Harness verify;
  ASSERT_TRUE(verify.Start(Defaults(api_->WriteKubeconfig({.ca = ""}))).ok());  // system CAs
  Start(Defaults(api_->WriteKubeconfig({.ca = "", .insecure = true})));
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/a"}));
  ASSERT_TRUE(Eventually([&] { return verify.Errors("tls") >= 2; }));
  EXPECT_FALSE(verify.mux.AllSynced());
}

TEST_F(KubeSourceTest, MasterAloneWithoutAKubeconfig) {
  StartApi();
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults("");
  o.master = api_->url();
  Start(std::move(o));
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/a"}));
}

TEST_F(KubeSourceTest, MalformedObjectsAndEventsAreSkipped) {
  StartApi();
  PutService("a", "10.96.0.1");
  PutService("bad", "10.96.0.2", 70000);
  StartPlain();
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/a"}));
  EXPECT_EQ(h_.Metric(R"(sluice_source_decode_errors_total{source="kube"})"), 1);

  api_->Control(R"({"op":"raw","resource":"services","line":"this is not json"})");
  api_->Control(R"({"op":"raw","resource":"services","line":"{\"type\":\"ADDED\"}"})");
  api_->Control(R"({"op":"raw","resource":"services","line":"{\"type\":\"X\",\"object\":{}}"})");
  PutService("bad2", "10.96.0.3", 0);
  PutService("a", "not-an-ip");  // an update the decoder refuses: the last good one stays
  PutService("c", "10.96.0.4");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/c"); }));
  EXPECT_EQ(h_.Errors("malformed_event"), 3);
  EXPECT_EQ(h_.Metric(R"(sluice_source_decode_errors_total{source="kube"})"), 3);
  EXPECT_EQ(h_.Service("ns/a")->cluster_ips[0].ToString(), "10.96.0.1");
  EXPECT_FALSE(HasService("ns/bad2"));

  // A relist keeps the last good version of an object that is still bad.
  api_->Control(R"({"op":"compact"})");
  api_->Control(R"({"op":"close_watches"})");
  ASSERT_TRUE(
      Eventually([&] { return h_.Metric(R"(sluice_source_relists_total{source="kube"})") >= 1; }));
  EXPECT_EQ(h_.Services(), (std::set<std::string>{"ns/a", "ns/c"}));
  EXPECT_EQ(h_.Service("ns/a")->cluster_ips[0].ToString(), "10.96.0.1");
}

std::string BigService(const std::string& name, size_t annotation_bytes) {
  return absl::StrCat(R"({"metadata":{"name":")", name,
                      R"(","namespace":"ns","annotations":{"big":")",
                      std::string(annotation_bytes, 'x'),
                      R"("}},"spec":{"clusterIP":"10.96.1.1","ports":[{"port":80}]}})");
}

TEST_F(KubeSourceTest, AnOversizedEventIsRefusedAndTheKindRelisted) {
  StartApi();
  PutService("a", "10.96.0.1");
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.watch.max_event_bytes = 1 << 20;
  Start(std::move(o));
  // Large events arrive in many reads and chunks.
  api_->Put("services", BigService("big", 700 << 10));
  ASSERT_TRUE(Eventually([&] { return HasService("ns/big"); }));
  EXPECT_EQ(h_.Errors("oversized_event"), 0);
  // Over the cap: refused; the relist (pages have their own, larger cap) brings it in.
  api_->Put("services", BigService("huge", 3 << 19));
  ASSERT_TRUE(Eventually([&] { return HasService("ns/huge"); }));
  EXPECT_EQ(h_.Errors("oversized_event"), 1);
  EXPECT_EQ(h_.Metric(R"(sluice_source_relists_total{source="kube"})"), 1);
  PutService("after", "10.96.0.9");
  ASSERT_TRUE(Eventually([&] { return HasService("ns/after"); }));
}

TEST_F(KubeSourceTest, TheNodeZoneLabelIsFollowed) {
  StartApi();
  auto node = [](const std::string& name, const std::string& zone, const std::string& extra) {
    return absl::StrCat(R"({"metadata":{"name":")", name,
                        R"(","labels":{"topology.kubernetes.io/zone":")", zone, "\"", extra, "}}}");
  };
  api_->Put("nodes", node("node1", "zone-a", ""));
  api_->Put("nodes", node("node2", "zone-x", ""));
  absl::Mutex mu;
  std::vector<std::string> zones;
  KubeSource::Options o = Defaults(api_->WriteKubeconfig({.ca = ""}));
  o.on_zone = [&](const std::string& zone) {
    absl::MutexLock lock(&mu);
    zones.push_back(zone);
  };
  Start(std::move(o));
  auto seen = [&] {
    absl::MutexLock lock(&mu);
    return zones;
  };
  ASSERT_TRUE(Eventually([&] { return seen() == std::vector<std::string>{"zone-a"}; }));
  EXPECT_EQ(Lists("/api/v1/nodes")[0].query["fieldSelector"], "metadata.name=node1");
  api_->Put("nodes", node("node1", "zone-a", R"(,"other":"label")"));
  api_->Put("nodes", node("node2", "zone-y", ""));
  api_->Put("nodes", node("node1", "zone-b", ""));
  ASSERT_TRUE(Eventually([&] { return seen().size() == 2; }));
  EXPECT_EQ(seen(), (std::vector<std::string>{"zone-a", "zone-b"}));
}

}  // namespace
}  // namespace sluice::testing
