// SPDX-License-Identifier: Apache-2.0
// The real sluice-agent with --source=kube against the test API server, in a private network
// namespace (tests/integration/agent_fixture.h): a Service created through the API is proxied
// through its VIP, follows endpoint, zone and deletion changes, and /healthz waits for the
// first sync.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "httplib.h"

#include "tests/integration/kube/api_agent_test.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::Hello;
using testutil::Subprocess;
using testutil::TcpServer;
using testutil::WaitFor;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

std::string Node(const std::string& zone) {
  return absl::StrCat(R"({"metadata":{"name":"node1","labels":{"topology.kubernetes.io/zone":")",
                      zone, R"("}}})");
}

class KubeAgentTest : public ApiAgentTest {
 protected:
  int Healthz() {
    int status = 0;
    Get("/healthz", &status);
    return status;
  }
};

TEST_F(KubeAgentTest, ProxiesAnApiServiceThroughItsVipAndFollowsChanges) {
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  auto b = TcpServer::Start(Addr("127.0.0.3:8080"), TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(a && b);
  api_->Put("services", ServiceJson("test", "web", "10.96.0.10", 80));
  api_->Put("endpointslices",
            SliceJson("test", "web", "web-1", {"127.0.0.2", "127.0.0.3"}, 8080, "",
                      {R"("hints":{"forZones":[{"name":"zone-a"}]})",
                       R"("hints":{"forZones":[{"name":"zone-b"}]})"}));
  api_->Put("nodes", Node("zone-b"));
  // The agent's token is not accepted yet: it retries, and is not ready.
  const std::string token_file = api_->dir() + "/token";
  std::ofstream(token_file) << "stale-token-7f3a";
  api_->Control(R"({"op":"auth","tokens":["fresh-token-9c2e"]})");
  StartAgent({"--source=kube",
              "--kubeconfig=" + api_->WriteKubeconfig({.token_file = token_file, .ca = "file"})});
  ASSERT_TRUE(WaitFor(
      [&] {
        return MetricValue(R"(sluice_source_errors_total{source="kube",reason="unauthorized"})") >=
               2;
      },
      absl::Seconds(10)))
      << Metrics();  // refused, the token re-read, refused again
  EXPECT_EQ(Healthz(), 503);

  // The rotated token is read after the next 401.
  std::ofstream(token_file) << "fresh-token-9c2e";
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", true, absl::Seconds(20))) << agent_->Output();
  ASSERT_TRUE(WaitFor([&] { return Healthz() == 200; }, absl::Seconds(10)));
  // The Node says zone-b, so the hints leave only b (no --zone given).
  ASSERT_TRUE(WaitFor([&] { return Hello("10.96.0.10:80") == "b"; }, absl::Seconds(10)));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Hello("10.96.0.10:80"), "b");
  }
  api_->Put("nodes", Node("zone-a"));
  ASSERT_TRUE(WaitFor([&] { return Hello("10.96.0.10:80") == "a"; }, absl::Seconds(10)))
      << agent_->Output();

  // Endpoint change, then a port change, then deletion.
  api_->Put("endpointslices", SliceJson("test", "web", "web-1", {"127.0.0.3"}, 8080));
  ASSERT_TRUE(WaitFor([&] { return Hello("10.96.0.10:80") == "b"; }, absl::Seconds(10)));
  api_->Put("services", ServiceJson("test", "web", "10.96.0.10", 81));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:81"));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", false));
  api_->Delete("services", "test", "web");
  ASSERT_TRUE(WaitListener("tcp/10.96.0.10:81", false));

  EXPECT_GE(MetricValue(R"(sluice_source_events_total{source="kube",type="MODIFIED"})"), 2);
  EXPECT_GE(MetricValue(R"(sluice_source_events_total{source="kube",type="DELETED"})"), 1);
  EXPECT_EQ(MetricValue(R"(sluice_source_relists_total{source="kube"})"), 0);
  EXPECT_GE(MetricValue("kubeproxy_sync_proxy_rules_last_timestamp_seconds"), 1e9);
  // The token never reaches the log.
  EXPECT_EQ(agent_->Output().find("fresh-token-9c2e"), std::string::npos);
  EXPECT_EQ(agent_->Output().find("stale-token-7f3a"), std::string::npos);
  EXPECT_EQ(agent_->Output().find("Bearer"), std::string::npos);
}

// A kube-proxy DaemonSet's container unchanged: the binary called as kube-proxy with kubeadm's
// default config.conf (1.26 and 1.30, from the ConfigMap) and kubeadm's arguments, or with the
// flags-only argument list of kops and kube-up. Only what a test must change is changed: the
// kubeconfig (the test API server), the health and metrics addresses (free ports instead of
// the node's), and socket-level balancing off (never the machine's root cgroup in a test).
TEST_F(KubeAgentTest, RunsAsKubeProxyWithKubeadmsConfigMapOrKubeProxysFlags) {
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  ASSERT_TRUE(a);
  api_->Put("services", ServiceJson("test", "web", "10.96.0.10", 80));
  api_->Put("endpointslices", SliceJson("test", "web", "web-1", {"127.0.0.2"}, 8080));
  const std::string kube_proxy =
      (std::filesystem::path(SLUICE_AGENT_BINARY).parent_path() / "kube-proxy").string();
  const std::string kubeconfig = api_->WriteKubeconfig({.ca = "file"});
  // Runs kube-proxy with `args`; checks the service, /healthz on `healthz_port`, /metrics.
  auto run = [&](std::vector<std::string> args, int healthz_port) {
    args.insert(args.begin(), kube_proxy);
    args.insert(args.end(), {"--socket-lb=off", "--bpf-root=", "--external-datapath=proxy",
                             "--allow-loopback", "--state-dir=" + dir_ + "/.state"});
    agent_ = std::make_unique<Subprocess>(args);
    ASSERT_TRUE(WaitListener("tcp/10.96.0.10:80", true, absl::Seconds(20))) << agent_->Output();
    ASSERT_TRUE(WaitFor([&] { return Hello("10.96.0.10:80") == "a"; }, absl::Seconds(10)));
    httplib::Client healthz("127.0.0.1", healthz_port);
    ASSERT_TRUE(WaitFor(
        [&] {
          auto res = healthz.Get("/healthz");
          return res && res->status == 200;
        },
        absl::Seconds(10)));
    EXPECT_GE(MetricValue("kubeproxy_sync_proxy_rules_last_timestamp_seconds"), 1e9);
  };
  auto stop = [&] {
    agent_->Signal(SIGTERM);
    ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  };
  for (const char* version : {"1.26", "1.30"}) {
    SCOPED_TRACE(version);
    std::ifstream in(absl::StrCat(SLUICE_APP_TESTDATA, "/kubeadm-", version, "-config.conf"));
    std::stringstream text;
    text << in.rdbuf();
    const int healthz_port = testutil::FreePort();
    const std::string config = absl::StrReplaceAll(
        text.str(),
        {{"kubeconfig: /var/lib/kube-proxy/kubeconfig.conf", "kubeconfig: " + kubeconfig},
         {"healthzBindAddress: \"\"", absl::StrCat("healthzBindAddress: 127.0.0.1:", healthz_port)},
         {"metricsBindAddress: \"\"",
          absl::StrCat("metricsBindAddress: 127.0.0.1:", metrics_port_)}});
    ASSERT_NE(config, text.str());
    const std::string path = dir_ + "/config.conf";
    std::ofstream(path) << config;
    run({"--config=" + path, "--hostname-override=Node1"}, healthz_port);
    // Reported once: the one field of kubeadm's file sluice does not use.
    const std::string out = agent_->Output();
    EXPECT_NE(out.find("--cluster-cidr (clusterCIDR) is accepted"), std::string::npos) << out;
    EXPECT_EQ(out.find("--cluster-cidr", out.find("--cluster-cidr") + 1), std::string::npos);
    stop();
  }
  const int healthz_port = testutil::FreePort();
  run({"--kubeconfig=" + kubeconfig, "--cluster-cidr=10.244.0.0/16",
       "--conntrack-max-per-core=131072", "--hostname-override=node1", "--oom-score-adj=998",
       "--v=2", "--iptables-sync-period=1m", "--iptables-min-sync-period=0s",
       "--ipvs-sync-period=1m", "--ipvs-min-sync-period=10s", "--detect-local-mode=NodeCIDR",
       "--feature-gates=AllAlpha=false", "--proxy-mode=iptables",
       absl::StrCat("--healthz-bind-address=127.0.0.1:", healthz_port),
       absl::StrCat("--metrics-bind-address=127.0.0.1:", metrics_port_)},
      healthz_port);
  std::ifstream oom(absl::StrCat("/proc/", agent_->pid(), "/oom_score_adj"));
  int oom_score_adj = 0;
  oom >> oom_score_adj;
  EXPECT_EQ(oom_score_adj, 998);  // kops passes -998; lowering needs CAP_SYS_RESOURCE
  EXPECT_NE(agent_->Output().find("--proxy-mode / mode \"iptables\" selects no data path"),
            std::string::npos)
      << agent_->Output();
  stop();
}

TEST_F(KubeAgentTest, AnExpiredWatchRelistsAndRemovesWhatWasDeletedMeanwhile) {
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  ASSERT_TRUE(a);
  for (const char* name : {"one", "two"}) {
    const std::string ip = std::string("10.96.0.") + (name[0] == 'o' ? "11" : "12");
    api_->Put("services", ServiceJson("test", name, ip, 80));
    api_->Put("endpointslices",
              SliceJson("test", name, std::string(name) + "-1", {"127.0.0.2"}, 8080));
  }
  StartAgent(
      {"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"}), "--zone=zone-z"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80")) << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.12:80"));
  EXPECT_EQ(Hello("10.96.0.11:80"), "a");
  api_->Control(R"({"op":"hold","value":true})");
  api_->Delete("services", "test", "one");
  api_->Control(R"({"op":"compact"})");
  api_->Control(R"({"op":"hold","value":false})");  // the running watches get ERROR 410
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80", false)) << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.12:80"), "a");
  EXPECT_GE(MetricValue(R"(sluice_source_relists_total{source="kube"})"), 1);
  // --zone given: the Node is watched for its eligibility only (KEP-3836); that there is none
  // held nothing up.
  bool node_watched = false;
  for (const auto& r : api_->Requests()) {
    node_watched = node_watched || r.path == "/api/v1/nodes";
  }
  EXPECT_TRUE(node_watched);
}

}  // namespace
}  // namespace sluice::testing
