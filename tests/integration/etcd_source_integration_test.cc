// SPDX-License-Identifier: Apache-2.0
// The etcd source end to end: a real etcd (Debian's etcd-server, driven with etcdctl) and the
// real sluice-agent, both inside the test's private network namespace.
#include <signal.h>
#include <sys/socket.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "httplib.h"

#include "tests/integration/agent_fixture.h"
#include "tests/integration/etcd_server.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::WaitFor;

constexpr char kPrefix[] = "/sluice/registry";
constexpr absl::Duration kApply = absl::Seconds(10);

std::string ServiceKey(const std::string& name) {
  return absl::StrCat(kPrefix, "/services/test/", name);
}
std::string SliceKey(const std::string& name) {
  return absl::StrCat(kPrefix, "/endpointslices/test/", name);
}

std::string ServiceJson(const std::string& name, const std::string& ip, int port) {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":")", name,
                      R"(","namespace":"test"},"spec":{"clusterIP":")", ip, R"(","clusterIPs":[")",
                      ip, R"("],"ports":[{"name":"http","port":)", port, "}]}}");
}

std::string SliceJson(const std::string& name, const std::string& service,
                      const std::vector<std::string>& addresses, int port = 8080) {
  std::vector<std::string> endpoints;
  endpoints.reserve(addresses.size());
  for (const auto& a : addresses) {
    endpoints.push_back(absl::StrCat(R"({"addresses":[")", a, R"("]})"));
  }
  return absl::StrCat(
      R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":")", name,
      R"(","namespace":"test","labels":{"kubernetes.io/service-name":")", service,
      R"("}},"addressType":"IPv4","endpoints":[)", absl::StrJoin(endpoints, ","),
      R"(],"ports":[{"name":"http","port":)", port, "}]}");
}

class EtcdSourceTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    auto etcd = EtcdServer::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
  }
  void TearDown() override {
    etcd_.reset();  // inside the namespace, before it goes
    AgentTest::TearDown();
  }
  void StartEtcdAgent(const std::string& urls, std::vector<std::string> extra = {}) {
    healthz_port_ = testutil::FreePort();
    extra.push_back("--source=etcd:" + urls);
    extra.push_back(absl::StrCat("--healthz-bind-address=127.0.0.1:", healthz_port_));
    StartAgent(extra);
  }
  void Put(const std::string& key, const std::string& value) {
    ASSERT_TRUE(etcd_->Put(key, value).ok());
  }
  void PutWeb(int port, const std::vector<std::string>& backends) {
    Put(ServiceKey("web"), ServiceJson("web", "10.96.0.10", port));
    Put(SliceKey("web-1"), SliceJson("web-1", "web", backends));
  }
  bool Contains(const std::string& text) {
    return Get("/debug/services").find(text) != std::string::npos;
  }
  bool WaitContains(const std::string& text, bool present = true) {
    return WaitFor([&] { return Contains(text) == present; }, kApply);
  }
  int Healthz() {
    httplib::Client c("127.0.0.1", healthz_port_);
    c.set_connection_timeout(1, 0);
    auto res = c.Get("/healthz");
    return res ? res->status : -1;
  }
  std::string Source() const { return "etcd:" + etcd_->url(); }
  double SourceMetric(const std::string& name, const std::string& extra_labels = "") {
    return MetricValue(absl::StrCat(name, "{source=\"", Source(), "\"", extra_labels, "}"));
  }

  std::unique_ptr<EtcdServer> etcd_;
  int healthz_port_ = 0;
};

TEST_F(EtcdSourceTest, InitialStateSkipsMalformedValues) {
  PutWeb(80, {"127.0.0.2"});
  // A bad port, not JSON, a name that disagrees with its key, and a key of the wrong shape.
  Put(ServiceKey("bad-port"), ServiceJson("bad-port", "10.96.0.11", 70000));
  Put(ServiceKey("yaml"), "kind: Service\n");
  Put(ServiceKey("liar"), ServiceJson("someone-else", "10.96.0.12", 80));
  Put(absl::StrCat(kPrefix, "/services/test"), ServiceJson("web", "10.96.0.13", 80));
  // Other resources under the prefix are not ours to read: ignored, not errors.
  Put(absl::StrCat(kPrefix, "/configmaps/test/x"), "{}");
  StartEtcdAgent(etcd_->url());

  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_TRUE(Contains("\"127.0.0.2:8080\""));
  for (const char* name : {"bad-port", "yaml", "liar", "someone-else"}) {
    EXPECT_FALSE(Contains(absl::StrCat("test/", name))) << name;
  }
  EXPECT_EQ(SourceMetric("sluice_source_decode_errors_total"), 4);
  EXPECT_EQ(SourceMetric("sluice_source_objects", ",kind=\"Service\""), 1);
  EXPECT_EQ(SourceMetric("sluice_source_objects", ",kind=\"EndpointSlice\""), 1);
  EXPECT_GT(SourceMetric("sluice_source_last_sync_timestamp_seconds"), 0);
  const std::string log = agent_->Output();
  EXPECT_NE(log.find(ServiceKey("bad-port") + " (revision"), std::string::npos) << log;
  EXPECT_NE(log.find("spec.ports[0].port: must be between 1 and 65535"), std::string::npos);
  EXPECT_NE(log.find("value is not JSON"), std::string::npos);
  EXPECT_NE(log.find("metadata.name is \"someone-else\" but the key names \"liar\""),
            std::string::npos);
  EXPECT_NE(log.find("/NAMESPACE/NAME"), std::string::npos);
  EXPECT_EQ(Healthz(), 200);
}

// No API server checks what is stored in etcd, so the agent refuses special addresses itself,
// naming the key and field (an externalIP 0.0.0.0 would listen on every node address, an
// endpoint at 169.254.169.254 proxy to the metadata service); the rest applies. Plain http is
// warned about.
TEST_F(EtcdSourceTest, SpecialAddressesAreRefusedWithTheFieldNamed) {
  PutWeb(80, {"127.0.0.2"});
  Put(ServiceKey("wild"),
      absl::StrCat(R"({"metadata":{"name":"wild"},"spec":{"clusterIP":"10.96.0.11",)",
                   R"("externalIPs":["0.0.0.0"],"ports":[{"name":"http","port":80}]}})"));
  Put(ServiceKey("meta"), ServiceJson("meta", "10.96.0.12", 80));
  Put(SliceKey("meta-1"), SliceJson("meta-1", "meta", {"169.254.169.254"}));
  StartEtcdAgent(etcd_->url());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  ASSERT_TRUE(
      WaitFor([&] { return SourceMetric("sluice_source_decode_errors_total") == 2; }, kApply))
      << agent_->Output();
  const std::string log = agent_->Output();
  EXPECT_NE(log.find(absl::StrCat(ServiceKey("wild"), " (revision")), std::string::npos) << log;
  EXPECT_NE(log.find(R"(spec.externalIPs[0]: may not be unspecified, got "0.0.0.0")"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("endpoints[0].addresses[0]: may not be in the link-local range "
                     R"((169.254.0.0/16, fe80::/10), got "169.254.169.254")"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("is plaintext http"), std::string::npos) << log;
  EXPECT_FALSE(Contains("test/wild"));
  EXPECT_FALSE(Contains("169.254.169.254"));
}

TEST_F(EtcdSourceTest, FollowsAddModifyDelete) {
  StartEtcdAgent(etcd_->url());
  ASSERT_TRUE(WaitFor([&] { return Healthz() == 200; }, kApply)) << agent_->Output();

  PutWeb(80, {"127.0.0.2"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  // Modify: the port and the endpoints.
  Put(ServiceKey("web"), ServiceJson("web", "10.96.0.10", 81));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:81"));
  EXPECT_TRUE(WaitListener("tcp/10.96.0.10:80", false));
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3", "127.0.0.4"}));
  ASSERT_TRUE(WaitContains("\"127.0.0.4:8080\""));
  EXPECT_FALSE(Contains("\"127.0.0.2:8080\""));
  // A second slice of the same service merges in.
  Put(SliceKey("web-2"), SliceJson("web-2", "web", {"127.0.0.5"}));
  ASSERT_TRUE(WaitContains("\"127.0.0.5:8080\""));
  EXPECT_TRUE(Contains("\"127.0.0.3:8080\""));
  // Delete: the slices, then the service.
  ASSERT_TRUE(etcd_->Delete(SliceKey("web-1")).ok());
  ASSERT_TRUE(WaitContains("\"127.0.0.3:8080\"", false));
  ASSERT_TRUE(etcd_->Delete(SliceKey("web-2")).ok());
  EXPECT_TRUE(WaitListener("tcp/10.96.0.10:81", false));  // no endpoints: no listener
  EXPECT_TRUE(Contains("\"test/web\""));
  ASSERT_TRUE(etcd_->Delete(ServiceKey("web")).ok());
  EXPECT_TRUE(WaitContains("\"test/web\"", false));
  EXPECT_EQ(SourceMetric("sluice_source_objects", ",kind=\"Service\""), 0);
  EXPECT_GE(SourceMetric("sluice_source_updates_total"), 8);
  EXPECT_EQ(SourceMetric("sluice_source_relists_total"), 0);
}

TEST_F(EtcdSourceTest, MalformedUpdateKeepsTheLastGoodObject) {
  PutWeb(80, {"127.0.0.2"});
  StartEtcdAgent(etcd_->url());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();

  Put(ServiceKey("web"), ServiceJson("web", "10.96.0.10", 0));
  ASSERT_TRUE(
      WaitFor([&] { return SourceMetric("sluice_source_decode_errors_total") == 1; }, kApply))
      << agent_->Output();
  EXPECT_TRUE(Contains("\"servicePort\": 80,"));
  EXPECT_NE(agent_->Output().find(ServiceKey("web") + " (revision"), std::string::npos);

  // A value claiming another namespace is rejected too; everything else keeps applying.
  Put(ServiceKey("web"),
      R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"prod"},)"
      R"("spec":{"clusterIP":"10.96.0.10","ports":[{"name":"http","port":82}]}})");
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  ASSERT_TRUE(WaitContains("\"127.0.0.3:8080\""));
  EXPECT_TRUE(Contains("\"servicePort\": 80,"));
  EXPECT_EQ(SourceMetric("sluice_source_decode_errors_total"), 2);
  EXPECT_NE(agent_->Output().find("metadata.namespace is \"prod\" but the key names \"test\""),
            std::string::npos);

  // Fixed: applies.
  Put(ServiceKey("web"), ServiceJson("web", "10.96.0.10", 83));
  EXPECT_TRUE(WaitListener("tcp/10.96.0.10:83"));
  EXPECT_EQ(Healthz(), 200);
}

TEST_F(EtcdSourceTest, NotReadyUntilTheFirstReadThenSurvivesEtcdRestart) {
  PutWeb(80, {"127.0.0.2"});
  ASSERT_TRUE(etcd_->Stop().ok());
  StartEtcdAgent(etcd_->url());
  // No etcd: not ready, the failure is counted and the endpoint probed until etcd answers.
  ASSERT_TRUE(WaitFor(
      [&] { return SourceMetric("sluice_source_errors_total", ",reason=\"list\"") >= 1; }, kApply))
      << agent_->Output();
  ASSERT_TRUE(
      WaitFor([&] { return agent_->Output().find("is unreachable") != std::string::npos; }, kApply))
      << agent_->Output();
  EXPECT_EQ(Healthz(), 503);
  EXPECT_FALSE(Contains("test/web"));

  ASSERT_TRUE(etcd_->Restart().ok());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  ASSERT_TRUE(WaitFor([&] { return Healthz() == 200; }, kApply));

  // etcd goes away while the agent watches: the last state stays and health stays up.
  ASSERT_TRUE(etcd_->Stop().ok());
  ASSERT_TRUE(WaitFor(
      [&] { return SourceMetric("sluice_source_errors_total", ",reason=\"watch\"") >= 1; }, kApply))
      << agent_->Output();
  EXPECT_TRUE(Contains("\"127.0.0.2:8080\""));
  EXPECT_EQ(Healthz(), 200);
  // Back: the watch resumes where it stopped, without a re-read.
  ASSERT_TRUE(etcd_->Restart().ok());
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  ASSERT_TRUE(WaitContains("\"127.0.0.3:8080\"")) << agent_->Output();
  EXPECT_EQ(SourceMetric("sluice_source_relists_total"), 0);
}

// etcd stops while the agent watches and starts again: the probe finds it within its interval
// (not after a backoff that grew with the outage), and a change made then is served promptly.
TEST_F(EtcdSourceTest, AChangeAfterEtcdRestartsIsServedPromptly) {
  PutWeb(80, {"127.0.0.2"});
  StartEtcdAgent(etcd_->url());
  ASSERT_TRUE(WaitContains("\"127.0.0.2:8080\"")) << agent_->Output();
  ASSERT_TRUE(etcd_->Stop().ok());
  ASSERT_TRUE(
      WaitFor([&] { return agent_->Output().find("is unreachable") != std::string::npos; }, kApply))
      << agent_->Output();
  ASSERT_TRUE(etcd_->Restart().ok());
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  const absl::Time changed = absl::Now();
  ASSERT_TRUE(WaitContains("\"127.0.0.3:8080\"")) << agent_->Output();
  // The probe's 0.5 s and a watch; generous for a loaded machine.
  EXPECT_LT(absl::Now() - changed, absl::Seconds(5)) << agent_->Output();
  EXPECT_NE(agent_->Output().find("answers again"), std::string::npos) << agent_->Output();
}

TEST_F(EtcdSourceTest, CompactionWhileDisconnectedRereadsAndRemovesWhatVanished) {
  // The agent reaches etcd through a socat relay that the test can cut: while cut, etcd
  // changes and compacts, so the agent's watch revision is gone when it comes back.
  const int relay_port = testutil::FreePort();
  auto start_relay = [&] {
    auto relay = std::make_unique<testutil::Subprocess>(std::vector<std::string>{
        "socat", absl::StrCat("TCP-LISTEN:", relay_port, ",bind=127.0.0.1,reuseaddr"),
        absl::StrCat("TCP:127.0.0.1:", etcd_->client_port())});
    // socat (without fork) serves one connection and then stops listening; the agent may take
    // it at once. Wait for the listener or that connection, without using it up.
    EXPECT_TRUE(WaitFor(
        [&] {
          std::string out;
          testutil::RunCommand({"ss", "-Htan", "sport", "=", absl::StrCat(":", relay_port)}, &out);
          return out.find("LISTEN") != std::string::npos || out.find("ESTAB") != std::string::npos;
        },
        absl::Seconds(5)))
        << relay->Output();
    return relay;
  };
  PutWeb(80, {"127.0.0.2"});
  Put(ServiceKey("old"), ServiceJson("old", "10.96.0.20", 80));
  Put(SliceKey("old-1"), SliceJson("old-1", "old", {"127.0.0.9"}));
  Put(ServiceKey("keep"), ServiceJson("keep", "10.96.0.22", 80));
  auto relay = start_relay();
  const std::string via = absl::StrCat("http://127.0.0.1:", relay_port);
  StartEtcdAgent(via);
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80")) << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80"));

  relay.reset();  // SIGKILL: the agent's connection drops
  ASSERT_TRUE(WaitFor(
      [&] {
        return MetricValue(absl::StrCat("sluice_source_errors_total{source=\"etcd:", via,
                                        "\",reason=\"watch\"}")) >= 1;
      },
      kApply))
      << agent_->Output();
  ASSERT_TRUE(etcd_->Delete(ServiceKey("old")).ok());
  ASSERT_TRUE(etcd_->Delete(SliceKey("old-1")).ok());
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  Put(ServiceKey("new"), ServiceJson("new", "10.96.0.21", 80));
  Put(SliceKey("new-1"), SliceJson("new-1", "new", {"127.0.0.8"}));
  Put(ServiceKey("keep"), ServiceJson("keep", "10.96.0.22", 0));  // malformed: keeps port 80
  ASSERT_TRUE(etcd_->CompactAll().ok());
  relay = start_relay();

  ASSERT_TRUE(WaitListener("tcp/10.96.0.21:80")) << agent_->Output();
  EXPECT_TRUE(WaitListener("tcp/10.96.0.20:80", false));
  EXPECT_FALSE(Contains("test/old"));
  EXPECT_TRUE(Contains("\"127.0.0.3:8080\""));
  EXPECT_FALSE(Contains("\"127.0.0.2:8080\""));
  EXPECT_TRUE(Contains("\"test/keep\""));
  EXPECT_EQ(MetricValue(absl::StrCat("sluice_source_relists_total{source=\"etcd:", via, "\"}")), 1);
  EXPECT_EQ(
      MetricValue(absl::StrCat("sluice_source_decode_errors_total{source=\"etcd:", via, "\"}")), 1);
  EXPECT_NE(agent_->Output().find("is compacted"), std::string::npos) << agent_->Output();
  // The new watch works.
  Put(SliceKey("new-1"), SliceJson("new-1", "new", {"127.0.0.7"}));
  EXPECT_TRUE(WaitContains("\"127.0.0.7:8080\""));
}

TEST_F(EtcdSourceTest, MovesToTheNextEndpointWhenOneIsDown) {
  PutWeb(80, {"127.0.0.2"});
  const std::string dead = absl::StrCat("http://127.0.0.1:", testutil::FreePort());
  StartEtcdAgent(dead + "," + etcd_->url());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_EQ(Healthz(), 200);
}

TEST_F(EtcdSourceTest, TrafficThroughAVipProgrammedFromEtcd) {
  auto a = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.2:8080"),
                                      testutil::TcpServer::Mode::kHello, 0, "a");
  auto b = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.3:8080"),
                                      testutil::TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(a && b);
  StartEtcdAgent(etcd_->url());
  PutWeb(80, {"127.0.0.2"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  auto hello = [] { return testutil::Hello("10.96.0.10:80"); };
  EXPECT_EQ(hello(), "a");
  // Move the service to the other backend through etcd.
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  ASSERT_TRUE(WaitFor([&] { return hello() == "b"; }, kApply));
  EXPECT_EQ(hello(), "b");
  // Deleting the service in etcd closes the listener: clients are refused at once.
  ASSERT_TRUE(etcd_->Delete(ServiceKey("web")).ok());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", false));
  int err = 0;
  EXPECT_FALSE(testutil::ConnectTcp(*net::SocketAddress::Parse("10.96.0.10:80"), &err, 1000));
}

// etcd crashes (SIGKILL) under traffic and comes back, and its history is compacted past the
// agent's watch meanwhile: the services keep answering throughout (not one request fails), and
// the agent converges on what changed while etcd was back.
TEST_F(EtcdSourceTest, KilledUnderTrafficKeepsServingAndCatchesUp) {
  auto a = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.2:8080"),
                                      testutil::TcpServer::Mode::kHello, 0, "a");
  auto b = testutil::TcpServer::Start(*net::SocketAddress::Parse("127.0.0.3:8080"),
                                      testutil::TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(a && b);
  PutWeb(80, {"127.0.0.2"});
  Put(ServiceKey("old"), ServiceJson("old", "10.96.0.20", 80));
  Put(SliceKey("old-1"), SliceJson("old-1", "old", {"127.0.0.2"}));
  StartEtcdAgent(etcd_->url());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  testutil::HelloLoad load("10.96.0.10:80");
  ASSERT_TRUE(WaitFor([&] { return load.ok > 5; }, kApply));

  ASSERT_TRUE(etcd_->Kill().ok());
  ASSERT_TRUE(WaitFor(
      [&] { return SourceMetric("sluice_source_errors_total", ",reason=\"watch\"") >= 1; }, kApply))
      << agent_->Output();
  EXPECT_EQ(Healthz(), 200);
  ASSERT_TRUE(etcd_->Restart().ok()) << etcd_->Log();
  ASSERT_TRUE(etcd_->Delete(ServiceKey("old")).ok());
  Put(ServiceKey("new"), ServiceJson("new", "10.96.0.21", 80));
  Put(SliceKey("new-1"), SliceJson("new-1", "new", {"127.0.0.3"}));
  ASSERT_TRUE(etcd_->CompactAll().ok());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.21:80")) << agent_->Output();
  EXPECT_TRUE(WaitListener("tcp/10.96.0.20:80", false));
  EXPECT_EQ(testutil::Hello("10.96.0.21:80"), "b");
  const int ok = load.ok;
  ASSERT_TRUE(WaitFor([&] { return load.ok > ok + 5; }, kApply));
  EXPECT_EQ(load.failed, 0) << "a service etcd did not change stopped answering";
  // And the watch follows later changes.
  Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.3"}));
  EXPECT_TRUE(WaitFor([&] { return testutil::Hello("10.96.0.10:80") == "b"; }, kApply));
}

TEST_F(EtcdSourceTest, CustomPrefix) {
  Put("/other/services/test/web", ServiceJson("web", "10.96.0.10", 80));
  Put("/other/endpointslices/test/web-1", SliceJson("web-1", "web", {"127.0.0.2"}));
  PutWeb(81, {"127.0.0.3"});  // under the default prefix: not read
  StartEtcdAgent(etcd_->url(), {"--etcd-prefix=/other/"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  EXPECT_FALSE(Contains("\"servicePort\": 81,"));
}

class EtcdTlsTest : public AgentTest {};

TEST_F(EtcdTlsTest, ClientCertificatesOverHttps) {
  auto etcd = EtcdServer::Start({.tls = true});
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  ASSERT_TRUE((*etcd)->Put(ServiceKey("web"), ServiceJson("web", "10.96.0.10", 80)).ok());
  ASSERT_TRUE((*etcd)->Put(SliceKey("web-1"), SliceJson("web-1", "web", {"127.0.0.2"})).ok());
  StartAgent({"--source=etcd:" + (*etcd)->url(), "--etcd-cafile=" + (*etcd)->ca_file(),
              "--etcd-certfile=" + (*etcd)->client_cert(),
              "--etcd-keyfile=" + (*etcd)->client_key()});
  EXPECT_TRUE(WaitListener("tcp/10.96.0.10:80")) << agent_->Output();
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();

  // Without the client certificate etcd refuses us: nothing is read, errors are counted.
  StartAgent({"--source=etcd:" + (*etcd)->url(), "--etcd-cafile=" + (*etcd)->ca_file()});
  EXPECT_TRUE(WaitFor(
      [&] {
        return MetricValue(absl::StrCat("sluice_source_errors_total{source=\"etcd:", (*etcd)->url(),
                                        "\",reason=\"list\"}")) >= 1;
      },
      kApply))
      << agent_->Output();
  EXPECT_FALSE(Get("/debug/services").find("test/web") != std::string::npos);
}

}  // namespace
}  // namespace sluice::testing
