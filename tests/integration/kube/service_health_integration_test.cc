// SPDX-License-Identifier: Apache-2.0
// What a cloud load balancer sees, with the real sluice-agent (--source=kube, the test API
// server) in the test's network namespace (the node) and curl in a second namespace (the load
// balancer's prober, not on the node) routed to it over a veth: the health check node port of
// an externalTrafficPolicy Local LoadBalancer service, byte for byte as kube-proxy answers it,
// following the endpoints and the service; and /healthz turning 503 with nodeEligible false
// when the Node is tainted for deletion (KEP-3836) while /livez stays 200.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "tests/integration/kube/api_agent_test.h"

namespace sluice::testing {
namespace {

using testutil::RunCommand;
using testutil::WaitFor;

constexpr int kHealthPort = 32100;
constexpr char kNodeIp[] = "10.77.0.1";

std::string Node(const std::string& extra_spec = "") {
  return absl::StrCat(R"({"metadata":{"name":"node1"},"spec":{)", extra_spec, "}}");
}

std::string LoadBalancer(const std::string& type = "LoadBalancer", const std::string& name = "web",
                         const std::string& ip = "10.96.0.40") {
  return ServiceJson("shop", name, ip, 80, "",
                     absl::StrCat(R"("type":")", type, R"(","externalTrafficPolicy":"Local",)",
                                  R"("healthCheckNodePort":)", kHealthPort));
}

// The service's slice: one endpoint on `node`, ready or not (then terminating, as a pod going
// away), plus 10.0.0.2 on another node.
std::string Slice(const std::string& node, bool ready) {
  const std::string conditions = ready ? R"({"ready":true,"serving":true,"terminating":false})"
                                       : R"({"ready":false,"serving":true,"terminating":true})";
  return absl::StrCat(
      R"({"metadata":{"name":"web-1","namespace":"shop","labels":{"kubernetes.io/service-name":)",
      R"("web"}},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":)",
      conditions, R"(,"nodeName":")", node, R"("},{"addresses":["10.0.0.2"],"conditions":)",
      R"({"ready":true},"nodeName":"node2"}],"ports":[{"name":"http","port":8080,)",
      R"("protocol":"TCP"}]})");
}

std::string Body(int local_endpoints) {
  return absl::StrCat(
      "{\n\t\"service\": {\n\t\t\"namespace\": \"shop\",\n\t\t\"name\": \"web\"\n\t},\n"
      "\t\"localEndpoints\": ",
      local_endpoints, ",\n\t\"serviceProxyHealthy\": true\n}");
}

class ServiceHealthTest : public ApiAgentTest {
 protected:
  void SetUp() override {
    ApiAgentTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    client_ = absl::StrCat("sluice-lb-", getpid());
    ASSERT_EQ(RunCommand({"ip", "netns", "add", client_}), 0);
    for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", "node0", "type", "veth", "peer", "name", "lb0", "netns",
              client_},
             {"ip", "addr", "add", absl::StrCat(kNodeIp, "/24"), "dev", "node0"},
             {"ip", "addr", "add", "fd77::1/64", "dev", "node0", "nodad"},
             {"ip", "-n", client_, "addr", "add", "fd77::2/64", "dev", "lb0", "nodad"},
             {"ip", "link", "set", "node0", "up"},
             {"ip", "-n", client_, "addr", "add", "10.77.0.2/24", "dev", "lb0"},
             {"ip", "-n", client_, "link", "set", "lb0", "up"},
             {"ip", "-n", client_, "link", "set", "lo", "up"}}) {
      std::string out;
      ASSERT_EQ(RunCommand(cmd, &out), 0) << absl::StrJoin(cmd, " ") << ": " << out;
    }
    healthz_port_ = testutil::FreePort();
  }
  void TearDown() override {
    ApiAgentTest::TearDown();
    if (!client_.empty()) {
      RunCommand({"ip", "netns", "del", client_});
    }
  }

  // curl from the load balancer's namespace: the response head and body (or curl's error).
  struct Answer {
    int status = -1;  // -1: nothing answered
    std::string head;
    std::string body;
  };
  Answer Curl(const std::string& url) {
    std::string out;
    const int rc = RunCommand(
        {"ip", "netns", "exec", client_, "curl", "-sS", "-D", "-", "--max-time", "3", url}, &out);
    Answer a;
    const size_t end = out.find("\r\n\r\n");
    if (rc != 0 || end == std::string::npos || out.size() < 12) {
      a.head = out;
      return a;
    }
    a.status = std::stoi(out.substr(9, 3));  // "HTTP/1.1 200 OK"
    a.head = out.substr(0, end + 2);         // each header line ends in CRLF
    a.body = out.substr(end + 4);
    return a;
  }
  Answer HealthCheck() { return Curl(absl::StrCat("http://", kNodeIp, ":", kHealthPort, "/")); }
  bool WaitHealthCheck(int status, int local_endpoints = -1) {
    Answer last;
    bool ok = WaitFor(
        [&] {
          last = HealthCheck();
          return last.status == status &&
                 (local_endpoints < 0 || last.body == Body(local_endpoints));
        },
        absl::Seconds(15));
    EXPECT_TRUE(ok) << "want " << status << ", last answer: " << last.head << "\n" << last.body;
    return ok;
  }

  std::string client_;
  int healthz_port_ = 0;
};

TEST_F(ServiceHealthTest, HealthCheckNodePortFollowsLocalEndpointsAndTheService) {
  api_->Put("nodes", Node());
  api_->Put("services", LoadBalancer());
  api_->Put("endpointslices", Slice("node1", true));
  StartAgent({"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"})});

  // One local ready endpoint (10.0.0.2 is on node2): 200, kube-proxy's bytes and headers.
  ASSERT_TRUE(WaitHealthCheck(200, 1)) << agent_->Output();
  Answer a = Curl(absl::StrCat("http://", kNodeIp, ":", kHealthPort, "/any/path"));
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, Body(1));
  EXPECT_NE(a.head.find("Content-Type: application/json\r\n"), std::string::npos) << a.head;
  EXPECT_NE(a.head.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << a.head;
  EXPECT_NE(a.head.find("X-Load-Balancing-Endpoint-Weight: 1\r\n"), std::string::npos) << a.head;
  // Without --nodeport-addresses, on every address: IPv6 too, as Go's listener.
  a = Curl(absl::StrCat("http://[fd77::1]:", kHealthPort, "/"));
  EXPECT_EQ(a.status, 200) << a.head;
  EXPECT_EQ(a.body, Body(1));

  // Not ready (terminating), then on another node: 503 with 0; back: 200.
  api_->Put("endpointslices", Slice("node1", false));
  ASSERT_TRUE(WaitHealthCheck(503, 0));
  EXPECT_NE(HealthCheck().head.find("X-Load-Balancing-Endpoint-Weight: 0\r\n"), std::string::npos);
  api_->Put("endpointslices", Slice("node3", true));
  ASSERT_TRUE(WaitHealthCheck(503, 0));
  api_->Put("endpointslices", Slice("node1", true));
  ASSERT_TRUE(WaitHealthCheck(200, 1));

  // The type changes (no health check node port any more): the port closes; and again when
  // the service is deleted.
  api_->Put("services", LoadBalancer("NodePort"));
  ASSERT_TRUE(WaitHealthCheck(-1));
  api_->Put("services", LoadBalancer());
  ASSERT_TRUE(WaitHealthCheck(200, 1));
  api_->Delete("services", "shop", "web");
  ASSERT_TRUE(WaitHealthCheck(-1));
  EXPECT_NE(agent_->Output().find("closing the health check of service shop/web on port 32100"),
            std::string::npos);
}

// Two services given the same health check node port (the file and etcd sources have no API
// server to refuse it): the first to open it serves, the other is reported and counted at every
// sync, and takes the port once it is free, as kube-proxy's retries do.
TEST_F(ServiceHealthTest, APortTakenByAnotherServiceIsReportedAndRetried) {
  api_->Put("nodes", Node());
  api_->Put("services", LoadBalancer("LoadBalancer", "api", "10.96.0.41"));
  api_->Put("services", LoadBalancer());
  api_->Put("endpointslices", Slice("node1", true));  // web's; api has none here
  StartAgent({"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"})});
  // shop/api sorts first and holds the port: 503, no local endpoint.
  ASSERT_TRUE(WaitHealthCheck(503)) << agent_->Output();
  EXPECT_NE(HealthCheck().body.find(R"("name": "api")"), std::string::npos);
  const std::string failures =
      R"(sluice_service_health_check_listen_errors_total{service="shop/web"})";
  ASSERT_TRUE(WaitFor([&] { return MetricValue(failures) >= 2; }, absl::Seconds(15)))
      << Metrics();  // retried at the next (periodic) sync
  EXPECT_NE(agent_->Output().find("event: Warning FailedToStartServiceHealthcheck Service "
                                  "shop/web: node node1 failed to start healthcheck "
                                  "\"shop/web\" on port 32100"),
            std::string::npos)
      << agent_->Output();

  api_->Delete("services", "shop", "api");
  ASSERT_TRUE(WaitHealthCheck(200, 1)) << agent_->Output();
}

// --nodeport-addresses narrows the addresses, as for NodePorts.
TEST_F(ServiceHealthTest, NodePortAddressesSelectWhereItListens) {
  api_->Put("nodes", Node());
  api_->Put("services", LoadBalancer());
  api_->Put("endpointslices", Slice("node1", true));
  StartAgent({"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"}),
              "--nodeport-addresses=10.77.0.0/24"});
  ASSERT_TRUE(WaitHealthCheck(200, 1)) << agent_->Output();
  std::string out;  // from the node itself, on an address outside the range
  EXPECT_NE(RunCommand({"curl", "-sS", "--max-time", "3",
                        absl::StrCat("http://127.0.0.1:", kHealthPort, "/")},
                       &out),
            0)
      << out;
}

TEST_F(ServiceHealthTest, NodeTaintedForDeletionFailsHealthzButNotLivez) {
  api_->Put("nodes", Node());
  StartAgent({"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"}),
              absl::StrCat("--healthz-bind-address=0.0.0.0:", healthz_port_)});
  const std::string healthz = absl::StrCat("http://", kNodeIp, ":", healthz_port_, "/healthz");
  const std::string livez = absl::StrCat("http://", kNodeIp, ":", healthz_port_, "/livez");
  ASSERT_TRUE(WaitFor([&] { return Curl(healthz).status == 200; }, absl::Seconds(15)))
      << agent_->Output();
  Answer a = Curl(healthz);
  EXPECT_NE(a.body.find(R"(,"currentTime": ")"), std::string::npos) << a.body;
  EXPECT_NE(a.body.find(R"(", "nodeEligible": true})"), std::string::npos) << a.body;
  EXPECT_NE(a.head.find("X-Content-Type-Options: nosniff\r\n"), std::string::npos) << a.head;

  api_->Put("nodes", Node(R"("taints":[{"key":"ToBeDeletedByClusterAutoscaler",)"
                          R"("value":"1764266400","effect":"NoSchedule"}])"));
  ASSERT_TRUE(WaitFor([&] { return Curl(healthz).status == 503; }, absl::Seconds(15)))
      << agent_->Output();
  a = Curl(healthz);
  EXPECT_NE(a.body.find(R"(", "nodeEligible": false})"), std::string::npos) << a.body;
  EXPECT_EQ(Curl(livez).status, 200);
  EXPECT_EQ(Curl(livez).body.find("nodeEligible"), std::string::npos);

  api_->Put("nodes", Node());  // the autoscaler changed its mind
  ASSERT_TRUE(WaitFor([&] { return Curl(healthz).status == 200; }, absl::Seconds(15)));
  EXPECT_GE(MetricValue(R"(kubeproxy_proxy_healthz_total{code="503"})"), 1);
  EXPECT_GE(MetricValue(R"(kubeproxy_proxy_livez_total{code="200"})"), 2);
}

}  // namespace
}  // namespace sluice::testing
