// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/proxier.h"

#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "agent/control/config/mux.h"

namespace sluice::proxier {
namespace {

config::ServicePtr Svc(const std::string& name, const char* ip, int port) {
  auto s = std::make_shared<config::Service>();
  s->meta.id = {"default", name};
  s->cluster_ips = {*net::IpAddress::Parse(ip)};
  config::ServicePort p;
  p.port = port;
  s->ports.push_back(p);
  return s;
}

config::EndpointSlicePtr Slice(const std::string& service, const std::string& name,
                               const std::vector<const char*>& ips) {
  auto s = std::make_shared<config::EndpointSlice>();
  s->meta.id = {"default", name};
  s->service_name = service;
  for (const char* ip : ips) {
    config::Endpoint e;
    e.addresses = {*net::IpAddress::Parse(ip)};
    s->endpoints.push_back(e);
  }
  config::EndpointPort p;
  p.port = 8080;
  s->ports.push_back(p);
  return s;
}

// Records the deltas it is given; fails on demand.
class RecordingConsumer final : public TableConsumer {
 public:
  absl::Status Apply(const TableDelta& delta) override {
    tables.push_back(delta.table);
    changes.emplace_back(delta.changes.begin(), delta.changes.end());
    full.push_back(delta.full);
    return fail ? absl::UnavailableError("injected") : absl::OkStatus();
  }
  // The last delta as "name: prev -> cur" lines, each side the service port number and its
  // cluster endpoints, or "-" when absent.
  std::vector<std::string> Last() const {
    auto side = [](const ServicePortInfoPtr& info) {
      if (!info) {
        return std::string("-");
      }
      std::string out = std::to_string(info->port);
      for (const auto& e : info->cluster_endpoints) {
        out += " " + e.ToString();
      }
      return out;
    };
    std::vector<std::string> out;
    for (const PortChange& c : changes.back()) {
      out.push_back(c.name.ToString() + ": " + side(c.prev) + " -> " + side(c.cur));
    }
    return out;
  }
  std::vector<std::shared_ptr<const ServiceTable>> tables;
  std::vector<std::vector<PortChange>> changes;
  std::vector<bool> full;
  bool fail = false;
};

// The Apply calls begun and ended, by consumer name, of the StepConsumers sharing it.
struct Calls {
  absl::Mutex mu;
  std::map<std::string, int> begun ABSL_GUARDED_BY(mu);
  std::map<std::string, int> ended ABSL_GUARDED_BY(mu);
};

// Records each Apply's thread and which calls of the others had ended when it began. With
// `wait_for`, a full delta's Apply waits (30 s at most) until that consumer has begun as many
// calls as this one, and records whether it did: only if both run at once.
class StepConsumer final : public TableConsumer {
 public:
  StepConsumer(std::string name, Calls& calls, std::string wait_for = "")
      : name_(std::move(name)), calls_(calls), wait_for_(std::move(wait_for)) {}

  absl::Status Apply(const TableDelta& delta) override {
    threads.push_back(std::this_thread::get_id());
    absl::MutexLock lock(&calls_.mu);
    const int n = ++calls_.begun[name_];
    ended_before.push_back(calls_.ended);
    if (!wait_for_.empty() && delta.full) {
      auto other_begun = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_.mu) {
        return calls_.begun[wait_for_] >= n;
      };
      waited.push_back(
          calls_.mu.AwaitWithTimeout(absl::Condition(&other_begun), absl::Seconds(30)));
    }
    ++calls_.ended[name_];
    return fail ? absl::UnavailableError("injected") : absl::OkStatus();
  }

  std::vector<std::thread::id> threads;
  std::vector<std::map<std::string, int>> ended_before;
  std::vector<bool> waited;
  bool fail = false;

 private:
  const std::string name_;
  Calls& calls_;
  const std::string wait_for_;
};

class ProxierTest : public ::testing::Test {
 protected:
  ProxierTest() {
    mux_.AddServiceHandler(&tracker_);
    mux_.AddEndpointSliceHandler(&tracker_);
    proxier_.AddConsumer(&consumer_, "fake");
  }
  std::vector<std::string> Endpoints(const std::string& service) {
    const ServicePortInfo* info = proxier_.table()->Find({{"default", service}, "", {}});
    std::vector<std::string> out;
    if (info) {
      for (const auto& a : info->cluster_endpoints) {
        out.push_back(a.ToString());
      }
    }
    return out;
  }
  base::FakeClock clock_;
  base::Registry metrics_;
  config::Mux mux_;
  config::SourceChannel* src_ = mux_.Channel("file");
  ChangeTracker tracker_{clock_, [] {}};
  Proxier proxier_{tracker_, NodeInfo{}, clock_, metrics_};
  RecordingConsumer consumer_;
};

TEST_F(ProxierTest, WaitsForSourcesToSync) {
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80)});
  EXPECT_EQ(proxier_.Sync().value_or(true), false);  // not a run: the runner does not count it
  EXPECT_TRUE(consumer_.tables.empty());
  src_->MarkSynced();
  EXPECT_EQ(proxier_.Sync().value_or(false), true);
  ASSERT_EQ(consumer_.tables.size(), 1u);
  EXPECT_EQ(consumer_.tables[0]->ports().size(), 1u);
  EXPECT_NE(proxier_.LastSync(), absl::InfinitePast());
}

TEST_F(ProxierTest, SliceBeforeServiceAndUpdates) {
  src_->MarkSynced();
  src_->UpdateEndpointSlices(config::Op::kAdd, {Slice("a", "a-1", {"10.0.0.1"})});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_TRUE(proxier_.table()->ports().empty());
  src_->UpdateServices(config::Op::kAdd, {Svc("a", "10.96.0.1", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(Endpoints("a"), (std::vector<std::string>{"10.0.0.1:8080"}));
  src_->UpdateEndpointSlices(config::Op::kAdd, {Slice("a", "a-2", {"10.0.0.2"})});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(Endpoints("a"), (std::vector<std::string>{"10.0.0.1:8080", "10.0.0.2:8080"}));
  src_->UpdateEndpointSlices(config::Op::kRemove, {Slice("a", "a-1", {})});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(Endpoints("a"), (std::vector<std::string>{"10.0.0.2:8080"}));
  src_->UpdateServices(config::Op::kRemove, {Svc("a", "10.96.0.1", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_TRUE(proxier_.table()->ports().empty());
}

TEST_F(ProxierTest, UnchangedServicesKeepTheirEntries) {
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80), Svc("b", "10.96.0.2", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  auto before = proxier_.table();
  src_->UpdateServices(config::Op::kAdd, {Svc("b", "10.96.0.2", 81)});
  ASSERT_TRUE(proxier_.Sync().ok());
  auto after = proxier_.table();
  const ServicePortName a{{"default", "a"}, "", {}}, b{{"default", "b"}, "", {}};
  EXPECT_EQ(before->Get(a), after->Get(a));  // "a" not rebuilt
  EXPECT_NE(before->Get(b), after->Get(b));
  EXPECT_EQ(before->Get(b)->port, 80);  // the published table is a snapshot
}

TEST_F(ProxierTest, ConsumerFailureIsRetriedWithTheSameTable) {
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80)});
  consumer_.fail = true;
  EXPECT_FALSE(proxier_.Sync().ok());
  EXPECT_EQ(proxier_.LastSync(), absl::InfinitePast());
  consumer_.fail = false;
  ASSERT_TRUE(proxier_.Sync().ok());
  ASSERT_EQ(consumer_.tables.size(), 2u);
  EXPECT_EQ(consumer_.tables[1]->ports().size(), 1u);
}

TEST_F(ProxierTest, MetricsAreExported) {
  src_->MarkSynced();
  ASSERT_TRUE(proxier_.Sync().ok());
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("kubeproxy_sync_proxy_rules_duration_seconds_count 1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kubeproxy_sync_proxy_rules_last_timestamp_seconds 1700000000"),
            std::string::npos)
      << text;
}

TEST_F(ProxierTest, ANewZoneRebuildsHintedServices) {
  auto slice =
      std::make_shared<config::EndpointSlice>(*Slice("a", "a-1", {"10.0.0.1", "10.0.0.2"}));
  slice->endpoints[0].has_hints = true;
  slice->endpoints[0].hint_zones = {"zone-a"};
  slice->endpoints[1].has_hints = true;
  slice->endpoints[1].hint_zones = {"zone-b"};
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80)});
  src_->UpdateEndpointSlices(config::Op::kSet, {slice});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(Endpoints("a"), (std::vector<std::string>{"10.0.0.1:8080", "10.0.0.2:8080"}));
  proxier_.SetZone("zone-b");
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(Endpoints("a"), (std::vector<std::string>{"10.0.0.2:8080"}));
  proxier_.SetZone("zone-b");  // unchanged: a periodic sync re-applies the same table
  auto before = proxier_.table();
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(proxier_.table(), before);
}

TEST_F(ProxierTest, ProgrammingLatencyRunsFromTheSliceTriggerTime) {
  auto changed = [](const char* name, const char* trigger) {
    auto s = std::make_shared<config::EndpointSlice>(*Slice("a", name, {"10.0.0.1"}));
    s->meta.annotations[config::kLastChangeTriggerTimeAnnotation] = trigger;
    return s;
  };
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80)});
  // A change from before the agent started (the initial list) would measure the agent's
  // downtime, not programming latency: kube-proxy leaves those out too.
  src_->UpdateEndpointSlices(config::Op::kSet, {changed("a-1", "2023-11-14T22:00:00Z")});
  clock_.Advance(absl::Seconds(3));
  src_->UpdateEndpointSlices(config::Op::kAdd, {changed("a-2", "2023-11-14T22:13:21Z")});
  ASSERT_TRUE(proxier_.Sync().ok());
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("kubeproxy_network_programming_duration_seconds_count 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("kubeproxy_network_programming_duration_seconds_sum 2\n"), std::string::npos)
      << text;
}

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Ne;

config::ServicePtr WithPort(config::ServicePtr svc, const std::string& name, int port) {
  auto s = std::make_shared<config::Service>(*svc);
  config::ServicePort p;
  p.name = name;
  p.port = port;
  s->ports.push_back(p);
  return s;
}

// Add, change (a new port number), endpoints changed, remove: each sync's delta names only
// those ports, with the objects before and after.
TEST_F(ProxierTest, DeltaNamesAddedChangedAndRemovedPorts) {
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80), Svc("b", "10.96.0.2", 80)});
  src_->UpdateEndpointSlices(config::Op::kSet, {Slice("a", "a-1", {"10.0.0.1"})});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(),
              ElementsAre("default/a:: - -> 80 10.0.0.1:8080", "default/b:: - -> 80"));

  // The port moves to another number: the same service port, changed.
  src_->UpdateServices(config::Op::kAdd, {Svc("a", "10.96.0.1", 81)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(), ElementsAre("default/a:: 80 10.0.0.1:8080 -> 81 10.0.0.1:8080"));

  // Only the endpoints change.
  src_->UpdateEndpointSlices(config::Op::kAdd, {Slice("a", "a-1", {"10.0.0.1", "10.0.0.2"})});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(),
              ElementsAre("default/a:: 81 10.0.0.1:8080 -> 81 10.0.0.1:8080 10.0.0.2:8080"));

  src_->UpdateServices(config::Op::kRemove, {Svc("b", "10.96.0.2", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(), ElementsAre("default/b:: 80 -> -"));
  // The published table is the one the consumer got, and shows the changes.
  EXPECT_EQ(proxier_.table(), consumer_.tables.back());
  EXPECT_EQ(proxier_.table()->ports().size(), 1u);
}

// A renamed port is another service port: the old one goes, the new one comes. Ports the
// change left as they were keep their objects and are not in the delta.
TEST_F(ProxierTest, DeltaLeavesUnchangedPortsOut) {
  src_->MarkSynced();
  auto two = WithPort(WithPort(Svc("a", "10.96.0.1", 80), "web", 8000), "metrics", 9090);
  src_->UpdateServices(config::Op::kSet, {two});
  ASSERT_TRUE(proxier_.Sync().ok());
  const ServicePortInfo* metrics = proxier_.table()->Find({{"default", "a"}, "metrics", {}});
  ASSERT_NE(metrics, nullptr);

  auto renamed = std::make_shared<config::Service>(*two);
  renamed->ports[1].name = "www";
  renamed->meta.annotations["note"] = "an annotation alone changes no port";
  src_->UpdateServices(config::Op::kAdd, {renamed});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(),
              ElementsAre("default/a:web: 8000 -> -", "default/a:www: - -> 8000"));
  EXPECT_EQ(proxier_.table()->Find({{"default", "a"}, "metrics", {}}), metrics);

  auto annotated = std::make_shared<config::Service>(*renamed);
  annotated->meta.annotations["note"] = "changed";
  src_->UpdateServices(config::Op::kAdd, {annotated});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.Last(), IsEmpty());
  EXPECT_FALSE(consumer_.full.back());
}

// Full: a consumer's first two syncs, the periodic resync (nothing changed), and the sync after
// that consumer failed; the other consumers go on with deltas.
TEST_F(ProxierTest, FullResyncWhenAConsumerNeedsOne) {
  RecordingConsumer other;
  proxier_.AddConsumer(&other, "other");
  src_->MarkSynced();
  src_->UpdateServices(config::Op::kSet, {Svc("a", "10.96.0.1", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  src_->UpdateServices(config::Op::kAdd, {Svc("b", "10.96.0.2", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  src_->UpdateServices(config::Op::kAdd, {Svc("c", "10.96.0.3", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.full, ElementsAre(true, true, false));
  EXPECT_THAT(consumer_.Last(), ElementsAre("default/c:: - -> 80"));

  ASSERT_TRUE(proxier_.Sync().ok());  // periodic: the same table, in full
  EXPECT_EQ(consumer_.full.back(), true);
  EXPECT_THAT(consumer_.Last(), IsEmpty());
  EXPECT_EQ(consumer_.tables.back(), consumer_.tables[2]);

  consumer_.fail = true;
  src_->UpdateServices(config::Op::kAdd, {Svc("d", "10.96.0.4", 80)});
  EXPECT_FALSE(proxier_.Sync().ok());
  consumer_.fail = false;
  src_->UpdateServices(config::Op::kAdd, {Svc("e", "10.96.0.5", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(consumer_.full, ElementsAre(true, true, false, true, false, true));
  EXPECT_THAT(other.full, ElementsAre(true, true, false, true, false, false));
  EXPECT_THAT(other.Last(), ElementsAre("default/e:: - -> 80"));
  src_->UpdateServices(config::Op::kAdd, {Svc("f", "10.96.0.6", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_EQ(consumer_.full.back(), false);
}

// Proxier and sources for the consumer-order tests.
class ProxierOrderTest : public ::testing::Test {
 protected:
  ProxierOrderTest() {
    mux_.AddServiceHandler(&tracker_);
    mux_.AddEndpointSliceHandler(&tracker_);
  }

  base::FakeClock clock_;
  base::Registry metrics_;
  config::Mux mux_;
  ChangeTracker tracker_{clock_, [] {}};
  Proxier proxier_{tracker_, NodeInfo{}, clock_, metrics_};
};

// A kBeside consumer applies a full table on a thread of its own while the consumer before it
// applies; the next kAfter consumer begins once both ended. Its deltas stay on the sync's
// thread, in turn.
TEST_F(ProxierOrderTest, BesideConsumersApplyFullTablesAtOnce) {
  Calls calls;
  StepConsumer first("first", calls, "beside"), beside("beside", calls), next("next", calls);
  proxier_.AddConsumer(&first, "first");
  proxier_.AddConsumer(&beside, "beside", Proxier::Order::kBeside);
  proxier_.AddConsumer(&next, "next");
  config::SourceChannel* src = mux_.Channel("file");
  src->MarkSynced();
  for (const char* name : {"a", "b", "c"}) {  // full, full, then a delta
    src->UpdateServices(config::Op::kAdd, {Svc(name, "10.96.0.1", 80)});
    ASSERT_TRUE(proxier_.Sync().ok());
  }
  // `first` waited for `beside` to begin in the full syncs: they ran at once.
  EXPECT_THAT(first.waited, ElementsAre(true, true));
  const std::thread::id sync = std::this_thread::get_id();
  EXPECT_THAT(first.threads, Each(sync));
  EXPECT_THAT(beside.threads, ElementsAre(Ne(sync), Ne(sync), sync));
  EXPECT_THAT(next.threads, Each(sync));
  // The delta: `beside` after `first`; `next` after both, every time.
  EXPECT_EQ(beside.ended_before[2]["first"], 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(next.ended_before[i]["first"], i + 1);
    EXPECT_EQ(next.ended_before[i]["beside"], i + 1);
  }
}

// A kBeside consumer's failure fails the sync and makes its next delta full, as any consumer's.
TEST_F(ProxierOrderTest, BesideConsumerFailureMakesItsNextDeltaFull) {
  RecordingConsumer first, beside;
  proxier_.AddConsumer(&first, "first");
  proxier_.AddConsumer(&beside, "beside", Proxier::Order::kBeside);
  config::SourceChannel* src = mux_.Channel("file");
  src->MarkSynced();
  for (const char* name : {"a", "b", "c"}) {
    src->UpdateServices(config::Op::kAdd, {Svc(name, "10.96.0.1", 80)});
    ASSERT_TRUE(proxier_.Sync().ok());
  }
  beside.fail = true;
  src->UpdateServices(config::Op::kAdd, {Svc("d", "10.96.0.1", 80)});
  EXPECT_FALSE(proxier_.Sync().ok());
  EXPECT_EQ(proxier_.table()->ports().size(), 4u);  // published: the retry applies this table
  beside.fail = false;
  src->UpdateServices(config::Op::kAdd, {Svc("e", "10.96.0.1", 80)});
  ASSERT_TRUE(proxier_.Sync().ok());
  EXPECT_THAT(beside.full, ElementsAre(true, true, false, false, true));
  EXPECT_THAT(first.full, ElementsAre(true, true, false, false, false));
  EXPECT_EQ(beside.tables.back()->ports().size(), 5u);
}

// With no consumer before it (socket LB off), a kBeside consumer applies on the sync's thread.
TEST_F(ProxierOrderTest, BesideConsumerAddedFirstRunsOnTheSyncsThread) {
  Calls calls;
  StepConsumer beside("beside", calls), next("next", calls);
  proxier_.AddConsumer(&beside, "beside", Proxier::Order::kBeside);
  proxier_.AddConsumer(&next, "next");
  mux_.Channel("file")->MarkSynced();
  ASSERT_TRUE(proxier_.Sync().ok());  // full
  EXPECT_THAT(beside.threads, ElementsAre(std::this_thread::get_id()));
  EXPECT_EQ(next.ended_before[0]["beside"], 1);
}

}  // namespace
}  // namespace sluice::proxier
