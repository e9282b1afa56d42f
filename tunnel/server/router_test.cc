// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/router.h"

#include <vector>

#include "gtest/gtest.h"

namespace sluice::server {
namespace {

class FakeAgent final : public AgentLink {
 public:
  explicit FakeAgent(std::string id, std::string ids = "") : id_(std::move(id)) {
    ids_ = ParseAgentIdentifiers(ids);
  }
  bool SendToAgent(wire::Packet p, absl::AnyInvocable<void()> done) override {
    sent.push_back(p);
    if (done) {
      done();
    }
    return true;
  }
  const std::string& agent_id() const override { return id_; }
  const AgentIdentifiers& identifiers() const override { return ids_; }
  std::shared_ptr<wire::ReadGate> gate() override { return nullptr; }
  std::vector<wire::Packet> sent;

 private:
  std::string id_;
  AgentIdentifiers ids_;
};

class FakeFrontend final : public Frontend {
 public:
  bool Deliver(wire::Packet p, const std::shared_ptr<wire::ReadGate>&) override {
    got.push_back(p);
    return accept;
  }
  void Abort(const std::string& why) override { aborted = why; }
  std::vector<wire::Packet> got;
  bool accept = true;
  std::string aborted;
};

class RouterTest : public ::testing::Test {
 protected:
  base::Registry registry_;
  ServerMetrics metrics_{registry_};
};

TEST_F(RouterTest, NoAgent) {
  Router r({Strategy::kDefault}, metrics_);
  FakeFrontend f;
  EXPECT_EQ(r.Dial(&f, wire::MakeDialRequest("1.2.3.4:80", 1)), "No agent available");
}

TEST_F(RouterTest, DialDataCloseRoundTrip) {
  Router r({Strategy::kDefault}, metrics_);
  FakeAgent a("a");
  r.AddAgent(&a);
  FakeFrontend f;
  ASSERT_EQ(r.Dial(&f, wire::MakeDialRequest("1.2.3.4:80", 9)), "");
  ASSERT_EQ(a.sent.size(), 1u);
  EXPECT_NE(r.Dial(&f, wire::MakeDialRequest("1.2.3.4:80", 10)), "");  // second dial
  r.OnDialResponse(&a, wire::MakeDialResponse(9, 5, ""));
  ASSERT_EQ(f.got.size(), 1u);
  EXPECT_TRUE(r.SendData(&f, wire::MakeData(5, "x"), nullptr));
  EXPECT_FALSE(r.SendData(&f, wire::MakeData(6, "x"), nullptr));
  r.OnAgentData(&a, wire::MakeData(5, "y"));
  EXPECT_EQ(f.got.back().data().data(), "y");
  r.OnAgentData(&a, wire::MakeData(77, "z"));  // unknown: agent is told to close it
  EXPECT_EQ(a.sent.back().type(), CLOSE_REQ);
  EXPECT_TRUE(r.Close(&f, 5));
  r.OnAgentClose(&a, wire::MakeCloseResponse(5, ""));
  EXPECT_EQ(f.got.back().type(), CLOSE_RSP);
  EXPECT_EQ(metrics_.established.Value(), 0);
}

TEST_F(RouterTest, AgentLossFailsPendingAndClosesEstablished) {
  Router r({Strategy::kDefault}, metrics_);
  FakeAgent a("a");
  r.AddAgent(&a);
  FakeFrontend pending, established;
  ASSERT_EQ(r.Dial(&pending, wire::MakeDialRequest("h:1", 1)), "");
  ASSERT_EQ(r.Dial(&established, wire::MakeDialRequest("h:1", 2)), "");
  r.OnDialResponse(&a, wire::MakeDialResponse(2, 1, ""));
  r.RemoveAgent(&a);
  ASSERT_EQ(pending.got.size(), 1u);
  EXPECT_FALSE(pending.got[0].dialresponse().error().empty());
  EXPECT_EQ(established.got.back().type(), CLOSE_RSP);
  EXPECT_EQ(r.ReadyAgents(), 0);
}

TEST_F(RouterTest, OverflowAbortsAndClosesAtAgent) {
  Router r({Strategy::kDefault}, metrics_);
  FakeAgent a("a");
  r.AddAgent(&a);
  FakeFrontend f;
  ASSERT_EQ(r.Dial(&f, wire::MakeDialRequest("h:1", 1)), "");
  r.OnDialResponse(&a, wire::MakeDialResponse(1, 3, ""));
  f.accept = false;
  r.OnAgentData(&a, wire::MakeData(3, "big"));
  EXPECT_FALSE(f.aborted.empty());
  EXPECT_EQ(a.sent.back().type(), CLOSE_REQ);
}

TEST_F(RouterTest, StrategiesAndDrain) {
  Router r({Strategy::kDestHost, Strategy::kDefaultRoute}, metrics_);
  FakeAgent host("h", "host=node1&ipv4=10.0.0.1"), route("r", "default-route=true");
  r.AddAgent(&host);
  r.AddAgent(&route);
  FakeFrontend f1, f2, f3;
  ASSERT_EQ(r.Dial(&f1, wire::MakeDialRequest("10.0.0.1:10250", 1)), "");
  EXPECT_EQ(host.sent.size(), 1u);
  ASSERT_EQ(r.Dial(&f2, wire::MakeDialRequest("[fd00::9]:1", 2)), "");
  EXPECT_EQ(route.sent.size(), 1u);
  Router d({Strategy::kDefault}, metrics_);
  FakeAgent x("x"), y("y");
  d.AddAgent(&x);
  d.AddAgent(&y);
  d.SetDraining(&x);
  for (int i = 0; i < 20; ++i) {
    FakeFrontend f;
    ASSERT_EQ(d.Dial(&f, wire::MakeDialRequest("h:1", 100 + i)), "");
    d.RemoveFrontend(&f);
  }
  EXPECT_TRUE(x.sent.empty());
  EXPECT_FALSE(ParseStrategies("bogus").ok());
}

}  // namespace
}  // namespace sluice::server
