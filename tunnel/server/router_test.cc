// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/router.h"

#include <vector>

#include "gtest/gtest.h"

#include "tunnel/server/fake_agent.h"

namespace sluice::tunnel::server {
namespace {

class FakeFrontend final : public Frontend {
 public:
  bool Deliver(wire::Packet p, const std::shared_ptr<wire::ReadGate>& gate) override {
    got.push_back(p);
    gates.push_back(gate);
    return accept;
  }
  void Abort(const std::string& why) override { aborted = why; }
  void OnPeerWindow(int64_t w) override {
    window = w;
    window_before_delivery = got.size();
  }
  void OnCredit(int64_t bytes) override { credit += bytes; }
  bool Finished() const override { return finished; }
  std::vector<wire::Packet> got;
  std::vector<std::shared_ptr<wire::ReadGate>> gates;  // what each Deliver was given
  bool accept = true;
  bool finished = false;
  std::string aborted;
  int64_t window = 0;
  size_t window_before_delivery = 0;  // packets delivered when OnPeerWindow came
  int64_t credit = 0;
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
  ASSERT_TRUE(r.AddAgent(&a).ok());
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

// A windowed agent: the frontend learns its window before its DIAL_RSP, is never handed the
// stream's gate (the agent's credit bounds its queue, so nothing holds the stream), gets the
// agent's credits, and its grants reach the agent. An agent without the extension gets none.
TEST_F(RouterTest, WindowedAgentCarriesCreditsBothWays) {
  Router r({Strategy::kDefault}, metrics_);
  int reads = 0;  // a capture: GCC 12 misreads an empty lambda in AnyInvocable (-Wmaybe-uninit)
  FakeAgent a("a");
  a.window = 1 << 20;
  a.read_gate = std::make_shared<wire::ReadGate>([&reads] { ++reads; });
  ASSERT_TRUE(r.AddAgent(&a).ok());
  FakeFrontend f;
  ASSERT_EQ(r.Dial(&f, wire::MakeDialRequest("1.2.3.4:80", 9)), "");
  ASSERT_TRUE(r.OnAgentPacket(&a, wire::MakeDialResponse(9, 5, "")));
  EXPECT_EQ(f.window, 1 << 20);
  EXPECT_EQ(f.window_before_delivery, 0u);
  ASSERT_TRUE(r.OnAgentPacket(&a, wire::MakeData(5, "y")));
  EXPECT_EQ(f.gates.back(), nullptr);
  ASSERT_TRUE(r.OnAgentPacket(&a, wire::MakeCredit(5, 300)));
  ASSERT_TRUE(r.OnAgentPacket(&a, wire::MakeCredit(6, 300)));  // gone: ignored
  EXPECT_EQ(f.credit, 300);
  r.Credit(&f, 5, 1);
  EXPECT_EQ(a.sent.back().type(), SLUICE_CREDIT);
  EXPECT_EQ(a.sent.back().credit().connectid(), 5);
  EXPECT_EQ(a.sent.back().credit().bytes(), 1);

  FakeAgent upstream("u");
  upstream.read_gate = std::make_shared<wire::ReadGate>([&reads] { ++reads; });
  r.RemoveAgent(&a);
  ASSERT_TRUE(r.AddAgent(&upstream).ok());
  FakeFrontend g;
  ASSERT_EQ(r.Dial(&g, wire::MakeDialRequest("1.2.3.4:80", 3)), "");
  ASSERT_TRUE(r.OnAgentPacket(&upstream, wire::MakeDialResponse(3, 8, "")));
  EXPECT_EQ(g.window, 0);
  ASSERT_TRUE(r.OnAgentPacket(&upstream, wire::MakeData(8, "z")));
  EXPECT_EQ(g.gates.back(), upstream.read_gate);
  EXPECT_FALSE(r.OnAgentPacket(&upstream, wire::MakeCredit(8, 300)));  // not negotiated
  const size_t sent = upstream.sent.size();
  r.Credit(&g, 8, 100);
  EXPECT_EQ(upstream.sent.size(), sent);  // an upstream agent never sees a credit
}

uint64_t Count(const base::Histogram& h) {
  std::vector<uint64_t> buckets;
  double sum;
  uint64_t count;
  h.Snapshot(&buckets, &sum, &count);
  return count;
}

// Upstream's send_rsp: the DIAL_RSP cannot reach a frontend that finished while it dialled; the
// agent is told to close what it opened. Failed dials are not in the dial histogram.
TEST_F(RouterTest, DialResponseForAFinishedFrontendIsSendRsp) {
  Router r({Strategy::kDefault}, metrics_);
  FakeAgent a("a");
  ASSERT_TRUE(r.AddAgent(&a).ok());
  FakeFrontend gone, failed, ok;
  ASSERT_EQ(r.Dial(&gone, wire::MakeDialRequest("h:1", 1)), "");
  ASSERT_EQ(r.Dial(&failed, wire::MakeDialRequest("h:1", 2)), "");
  ASSERT_EQ(r.Dial(&ok, wire::MakeDialRequest("h:1", 3)), "");
  gone.finished = true;
  r.OnDialResponse(&a, wire::MakeDialResponse(1, 7, ""));
  EXPECT_TRUE(gone.got.empty());
  EXPECT_EQ(a.sent.back().type(), CLOSE_REQ);
  EXPECT_EQ(a.sent.back().closerequest().connectid(), 7);
  EXPECT_EQ(metrics_.dial_failures.WithLabels({"send_rsp"}).Value(), 1);
  r.OnDialResponse(&a, wire::MakeDialResponse(2, 0, "dial tcp h:1: connect: connection refused"));
  r.OnDialResponse(&a, wire::MakeDialResponse(3, 8, ""));
  EXPECT_EQ(Count(metrics_.dial_duration), 1u);
  EXPECT_EQ(metrics_.established.Value(), 1);
  EXPECT_EQ(r.Tunnels(), 1u);
}

TEST_F(RouterTest, AgentLossFailsPendingAndClosesEstablished) {
  Router r({Strategy::kDefault}, metrics_);
  FakeAgent a("a");
  ASSERT_TRUE(r.AddAgent(&a).ok());
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
  ASSERT_TRUE(r.AddAgent(&a).ok());
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
  ASSERT_TRUE(r.AddAgent(&host).ok());
  ASSERT_TRUE(r.AddAgent(&route).ok());
  FakeFrontend f1, f2, f3;
  ASSERT_EQ(r.Dial(&f1, wire::MakeDialRequest("10.0.0.1:10250", 1)), "");
  EXPECT_EQ(host.sent.size(), 1u);
  ASSERT_EQ(r.Dial(&f2, wire::MakeDialRequest("[fd00::9]:1", 2)), "");
  EXPECT_EQ(route.sent.size(), 1u);
  Router d({Strategy::kDefault}, metrics_);
  FakeAgent x("x"), y("y");
  ASSERT_TRUE(d.AddAgent(&x).ok());
  ASSERT_TRUE(d.AddAgent(&y).ok());
  ASSERT_TRUE(d.OnAgentPacket(&x, wire::MakeDrain()));
  EXPECT_FALSE(d.OnAgentPacket(&x, wire::MakeDialRequest("h:1", 1)));  // not an agent's packet
  for (int i = 0; i < 20; ++i) {
    FakeFrontend f;
    ASSERT_EQ(d.Dial(&f, wire::MakeDialRequest("h:1", 100 + i)), "");
    d.RemoveFrontend(&f);
  }
  EXPECT_TRUE(x.sent.empty());
  EXPECT_FALSE(ParseStrategies("bogus").ok());
}

TEST_F(RouterTest, PendingDialsAreLimitedPerClient) {
  Router r({Strategy::kDefault}, metrics_, RouterLimits{.max_pending_dials_per_client = 2});
  FakeAgent a("a");
  ASSERT_TRUE(r.AddAgent(&a).ok());
  FakeFrontend f1, f2, f3, other, later;
  ASSERT_EQ(r.Dial(&f1, wire::MakeDialRequest("h:1", 1), "10.0.0.1"), "");
  ASSERT_EQ(r.Dial(&f2, wire::MakeDialRequest("h:1", 2), "10.0.0.1"), "");
  EXPECT_EQ(r.Dial(&f3, wire::MakeDialRequest("h:1", 3), "10.0.0.1"), Router::kTooManyDials);
  EXPECT_EQ(r.Dial(&other, wire::MakeDialRequest("h:1", 4), "10.0.0.2"), "");  // its own count
  EXPECT_EQ(metrics_.limited.WithLabels({"pending_dials_per_client"}).Value(), 1);
  // Each way a dial stops pending frees its slot: an answer, a cancel, the frontend leaving.
  r.OnDialResponse(&a, wire::MakeDialResponse(1, 7, ""));
  ASSERT_EQ(r.Dial(&f3, wire::MakeDialRequest("h:1", 5), "10.0.0.1"), "");
  r.CancelDial(&f2, 2);
  r.RemoveFrontend(&f3);
  ASSERT_EQ(r.Dial(&later, wire::MakeDialRequest("h:1", 6), "10.0.0.1"), "");
  FakeFrontend last;
  ASSERT_EQ(r.Dial(&last, wire::MakeDialRequest("h:1", 8), "10.0.0.1"), "");
  FakeFrontend over;
  EXPECT_EQ(r.Dial(&over, wire::MakeDialRequest("h:1", 9), "10.0.0.1"), Router::kTooManyDials);
  // The agent going away fails its pending dials and frees them too.
  r.RemoveAgent(&a);
  FakeAgent b("b");
  ASSERT_TRUE(r.AddAgent(&b).ok());
  EXPECT_EQ(r.Dial(&over, wire::MakeDialRequest("h:1", 10), "10.0.0.1"), "");
}

TEST_F(RouterTest, AgentStreamsAreLimited) {
  Router r({Strategy::kDefault}, metrics_, RouterLimits{.max_agent_streams = 2});
  FakeAgent a("a"), a2("a"), b("b");
  ASSERT_TRUE(r.AddAgent(&a).ok());
  ASSERT_TRUE(r.AddAgent(&a2).ok());  // streams count, not agent ids
  EXPECT_FALSE(r.AddAgent(&b).ok());
  EXPECT_EQ(r.ReadyAgents(), 1);
  EXPECT_EQ(metrics_.limited.WithLabels({"agents"}).Value(), 1);
  r.RemoveAgent(&a);
  EXPECT_TRUE(r.AddAgent(&b).ok());
}

TEST_F(RouterTest, TunnelsAreLimitedPerClientAndPerAgent) {
  Router r({Strategy::kDefault}, metrics_,
           RouterLimits{.max_tunnels_per_client = 2, .max_tunnels_per_agent = 3});
  FakeAgent a("a");
  ASSERT_TRUE(r.AddAgent(&a).ok());
  FakeFrontend f1, f2, f3, g1, g2;
  ASSERT_EQ(r.Dial(&f1, wire::MakeDialRequest("h:1", 1), "10.0.0.1"), "");
  r.OnDialResponse(&a, wire::MakeDialResponse(1, 7, ""));  // established counts too
  ASSERT_EQ(r.Dial(&f2, wire::MakeDialRequest("h:1", 2), "10.0.0.1"), "");
  EXPECT_EQ(r.Dial(&f3, wire::MakeDialRequest("h:1", 3), "10.0.0.1"), Router::kTooManyTunnels);
  EXPECT_EQ(metrics_.limited.WithLabels({"tunnels_per_client"}).Value(), 1);
  // Another client has its own count, but the agent is full at 3.
  ASSERT_EQ(r.Dial(&g1, wire::MakeDialRequest("h:1", 4), "10.0.0.2"), "");
  EXPECT_EQ(r.Dial(&g2, wire::MakeDialRequest("h:1", 5), "10.0.0.2"), Router::kAgentsFull);
  EXPECT_EQ(metrics_.limited.WithLabels({"tunnels_per_agent"}).Value(), 1);
  // A full agent is passed over for one with room.
  FakeAgent b("b");
  ASSERT_TRUE(r.AddAgent(&b).ok());
  ASSERT_EQ(r.Dial(&g2, wire::MakeDialRequest("h:1", 6), "10.0.0.2"), "");
  EXPECT_EQ(b.sent.size(), 1u);
  // Closing frees both counts.
  r.OnAgentClose(&a, wire::MakeCloseResponse(7, ""));
  ASSERT_EQ(r.Dial(&f3, wire::MakeDialRequest("h:1", 8), "10.0.0.1"), "");
}

TEST_F(RouterTest, NodeClaimBindsAgentIdAndIdentifiers) {
  Router r({Strategy::kDestHost}, metrics_);
  FakeAgent a("agent-a", "host=node-a&ipv4=10.0.0.1", "node-a");
  ASSERT_TRUE(r.AddAgent(&a).ok());
  // host= must be the token's node.
  FakeAgent liar("agent-b", "host=node-a", "node-b");
  EXPECT_TRUE(absl::IsPermissionDenied(r.AddAgent(&liar)));
  // Another node may claim neither node-a's agent ID nor its IP.
  FakeAgent id_thief("agent-a", "host=node-b", "node-b");
  EXPECT_TRUE(absl::IsPermissionDenied(r.AddAgent(&id_thief)));
  FakeAgent ip_thief("agent-b", "ipv4=10.0.0.1", "node-b");
  EXPECT_TRUE(absl::IsPermissionDenied(r.AddAgent(&ip_thief)));
  // Nor may an agent whose token names no node.
  FakeAgent unbound("agent-c", "ipv4=10.0.0.1");
  EXPECT_TRUE(absl::IsPermissionDenied(r.AddAgent(&unbound)));
  EXPECT_EQ(metrics_.agent_refusals.WithLabels({"node_binding"}).Value(), 4);
  // node-a's second stream, and node-b with its own identity, are fine.
  FakeAgent a2("agent-a", "host=node-a&ipv4=10.0.0.1", "node-a");
  ASSERT_TRUE(r.AddAgent(&a2).ok());
  FakeAgent b("agent-b", "host=node-b&ipv4=10.0.0.2", "node-b");
  ASSERT_TRUE(r.AddAgent(&b).ok());
  FakeFrontend f;
  ASSERT_EQ(r.Dial(&f, wire::MakeDialRequest("10.0.0.1:10250", 1)), "");
  EXPECT_EQ(a.sent.size(), 1u);
  // Once node-a's streams are gone, its claims are free.
  r.RemoveAgent(&a);
  r.RemoveAgent(&a2);
  EXPECT_TRUE(r.AddAgent(&ip_thief).ok());
}

TEST(ClientOfTest, PeersCountByAddressNotPort) {
  EXPECT_EQ(ClientOf("ipv4:10.0.0.1:5678"), "10.0.0.1");
  EXPECT_EQ(ClientOf("ipv6:[fd00::1]:5678"), "fd00::1");
  EXPECT_EQ(ClientOf("10.0.0.1:5678"), "10.0.0.1");
  EXPECT_EQ(ClientOf("unix:/run/konnectivity.sock"), "unix");
  EXPECT_EQ(ClientOf(""), "unix");
}

}  // namespace
}  // namespace sluice::tunnel::server
