// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/node_watch.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice::sources {
namespace {

class NodeWatchTest : public ::testing::Test {
 protected:
  simdjson::dom::element Parse(const std::string& json) {
    docs_.push_back(std::make_unique<simdjson::dom::parser>());
    simdjson::dom::element e;
    EXPECT_EQ(docs_.back()->parse(json).get(e), simdjson::SUCCESS) << json;
    return e;
  }
  NodeFacts Facts(const std::string& json) { return ReadNodeFacts(Parse(json)); }

  std::vector<std::unique_ptr<simdjson::dom::parser>> docs_;
  base::Registry registry_;
  SourceMetricFamilies families_{registry_};
  SourceMetrics metrics_{families_, "kube"};
};

TEST_F(NodeWatchTest, ReadsZoneAndEligibilityAsKubeProxy) {
  EXPECT_EQ(Facts(R"({"metadata":{"name":"n"}})"), (NodeFacts{.zone = "", .eligible = true}));
  EXPECT_EQ(Facts(R"({"metadata":{"labels":{"topology.kubernetes.io/zone":"z1"}}})").zone, "z1");
  NodeFacts deleting =
      Facts(R"({"metadata":{"name":"n","deletionTimestamp":"2026-11-27T18:00:00Z"}})");
  EXPECT_FALSE(deleting.eligible);
  EXPECT_NE(deleting.why.find("deletionTimestamp"), std::string::npos);
  EXPECT_TRUE(Facts(R"({"metadata":{"name":"n","deletionTimestamp":null}})").eligible);
  // Any effect or value of the Cluster Autoscaler's taint; other taints do not count.
  NodeFacts tainted = Facts(
      R"({"metadata":{"name":"n"},"spec":{"taints":[{"key":"node.kubernetes.io/unschedulable",)"
      R"("effect":"NoSchedule"},{"key":"ToBeDeletedByClusterAutoscaler","value":"1732730000",)"
      R"("effect":"NoSchedule"}]}})");
  EXPECT_FALSE(tainted.eligible);
  EXPECT_NE(tainted.why.find("ToBeDeletedByClusterAutoscaler"), std::string::npos);
  EXPECT_TRUE(Facts(R"({"spec":{"taints":[{"key":"DeletionCandidateOfClusterAutoscaler",)"
                    R"("effect":"PreferNoSchedule"}]}})")
                  .eligible);
  EXPECT_TRUE(Facts(R"({"spec":{"taints":null}})").eligible);
}

TEST_F(NodeWatchTest, ReportsChangesOnlyAndDeletionFromTheDeletedObject) {
  std::vector<std::string> zones;
  std::vector<bool> eligible;
  int first_lists = 0;
  NodeWatch watch("n", metrics_,
                  {.on_zone = [&](const std::string& z) { zones.push_back(z); },
                   .on_eligible = [&](bool e) { eligible.push_back(e); },
                   .on_first_list = [&] { ++first_lists; }});
  const std::string plain =
      R"({"metadata":{"name":"n","labels":{"topology.kubernetes.io/zone":"a"}}})";
  const std::string tainted =
      R"({"metadata":{"name":"n","labels":{"topology.kubernetes.io/zone":"a"}},)"
      R"("spec":{"taints":[{"key":"ToBeDeletedByClusterAutoscaler","effect":"NoSchedule"}]}})";
  watch.OnListBegin();
  watch.OnListItem(Parse(plain));
  watch.OnListEnd();
  watch.OnWatchEvent(kube::EventType::kModified, Parse(plain));  // no change: no calls
  watch.OnWatchEvent(kube::EventType::kModified, Parse(tainted));
  watch.OnWatchEvent(kube::EventType::kModified, Parse(plain));
  watch.OnWatchEvent(
      kube::EventType::kDeleted,
      Parse(R"({"metadata":{"name":"n","deletionTimestamp":"2026-11-27T18:00:00Z"}})"));
  watch.OnListBegin();  // a relist after the Node went: nothing listed, nothing changes
  watch.OnListEnd();
  EXPECT_EQ(zones, std::vector<std::string>{"a"});
  EXPECT_EQ(eligible, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(first_lists, 1);
}

TEST_F(NodeWatchTest, CallbacksAreOptional) {
  NodeWatch watch("n", metrics_, {});
  watch.OnListBegin();
  watch.OnListItem(Parse(R"({"metadata":{"name":"n"}})"));
  watch.OnListEnd();
  watch.OnWatchEvent(kube::EventType::kAdded, Parse(R"({"metadata":{"name":"n"}})"));
  watch.OnError("connection");
  EXPECT_NE(registry_.Render().find("reason=\"node_connection\""), std::string::npos);
}

}  // namespace
}  // namespace sluice::sources
