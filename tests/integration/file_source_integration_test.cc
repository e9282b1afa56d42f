// SPDX-License-Identifier: Apache-2.0
// Runs the real sluice-agent on a directory source and checks /debug/services, /healthz and
// /metrics after each edit: in place, replace by rename, broken, fixed, bad object, removed.
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"

#include "tests/testutil/process.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using testutil::WaitFor;

std::string Service(const std::string& name, const std::string& ip, int port) {
  return absl::StrCat("apiVersion: v1\nkind: Service\nmetadata:\n  name: ", name,
                      "\n  namespace: demo\nspec:\n  clusterIP: ", ip,
                      "\n  ports:\n  - name: http\n    port: ", port, "\n");
}

std::string Slice(const std::string& service, const std::string& ip) {
  return absl::StrCat(
      "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ", service,
      "-1\n  namespace: demo\n  labels:\n    kubernetes.io/service-name: ", service,
      "\naddressType: IPv4\nendpoints:\n- addresses: [\"", ip,
      "\"]\nports:\n- name: http\n  port: 8080\n");
}

class FileSourceIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-it-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    healthz_port_ = testutil::FreePort();
    metrics_port_ = testutil::FreePort();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<testutil::Subprocess> StartAgent(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        SLUICE_AGENT_BINARY, "--source=file:" + dir_,
        absl::StrCat("--healthz-bind-address=127.0.0.1:", healthz_port_),
        absl::StrCat("--metrics-bind-address=127.0.0.1:", metrics_port_), "--sync-period=2s",
        "--min-sync-period=100ms", "--socket-lb=off", "--bpf-root=", "--external-datapath=proxy",
        // This test runs in the host's network namespace, whose ARP sysctls are not its own.
        "--strict-arp=false"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<testutil::Subprocess>(argv);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  void Replace(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/." + name + ".tmp") << text;
    fs::rename(dir_ + "/." + name + ".tmp", dir_ + "/" + name);
  }
  std::string Get(int port, const std::string& path, int* status = nullptr) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    auto res = c.Get(path.c_str());
    if (status != nullptr) {
      *status = res ? res->status : -1;
    }
    return res ? res->body : "";
  }
  std::string Services() { return Get(metrics_port_, "/debug/services"); }
  bool ServicesContain(const std::string& s) { return Services().find(s) != std::string::npos; }
  // Generous bound: the agent must apply within min-sync-period plus the inotify settle time.
  static constexpr absl::Duration kApply = absl::Seconds(5);

  std::string dir_;
  int healthz_port_ = 0;
  int metrics_port_ = 0;
};

TEST_F(FileSourceIntegrationTest, FollowsEditsAndKeepsLastGoodState) {
  Write("web.yaml", Service("web", "10.96.0.10", 80) + "---\n" + Slice("web", "10.0.0.1"));
  auto agent = StartAgent();
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"10.0.0.1:8080\""); }, kApply))
      << agent->Output();
  int status = 0;
  Get(healthz_port_, "/healthz", &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(Get(healthz_port_, "/healthz").find("\"lastUpdated\""), std::string::npos);

  // In-place edit.
  Write("web.yaml", Service("web", "10.96.0.10", 81) + "---\n" + Slice("web", "10.0.0.2"));
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"10.0.0.2:8080\""); }, kApply));
  EXPECT_TRUE(ServicesContain("\"servicePort\": 81"));

  // Replace by rename, as editors and ConfigMap updates do.
  Replace("web.yaml", Service("web", "10.96.0.10", 82) + "---\n" + Slice("web", "10.0.0.3"));
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"10.0.0.3:8080\""); }, kApply));

  // Broken file: the last good state stays, the error is logged and counted, health stays up.
  Write("web.yaml", "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        return agent->Output().find("keeping this file's last good state") != std::string::npos;
      },
      kApply))
      << agent->Output();
  EXPECT_TRUE(ServicesContain("\"10.0.0.3:8080\""));
  EXPECT_NE(
      Get(metrics_port_, "/metrics")
          .find("sluice_source_reloads_total{source=\"file:" + dir_ + "\",result=\"error\"} 1"),
      std::string::npos)
      << Get(metrics_port_, "/metrics");
  Get(healthz_port_, "/healthz", &status);
  EXPECT_EQ(status, 200);

  // Fixed, plus a second file with one bad and one good object: the good one applies.
  Write("web.yaml", Service("web", "10.96.0.10", 83) + "---\n" + Slice("web", "10.0.0.4"));
  Write("more.yaml",
        Service("bad", "10.96.0.11", 70000) + "---\n" + Service("good", "10.96.0.12", 90));
  ASSERT_TRUE(
      WaitFor([&] { return ServicesContain("\"10.0.0.4:8080\"") && ServicesContain("demo/good"); },
              kApply));
  EXPECT_FALSE(ServicesContain("demo/bad"));
  EXPECT_TRUE(
      WaitFor([&] { return agent->Output().find("demo/bad") != std::string::npos; }, kApply));

  // Removed file: its objects go.
  fs::remove(dir_ + "/more.yaml");
  ASSERT_TRUE(WaitFor([&] { return !ServicesContain("demo/good"); }, kApply));
  EXPECT_TRUE(ServicesContain("demo/web"));

  std::string metrics = Get(metrics_port_, "/metrics");
  for (const char* name : {"kubeproxy_sync_proxy_rules_duration_seconds_count",
                           "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
                           "kubeproxy_sync_proxy_rules_service_changes_total",
                           "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
                           "kubeproxy_network_programming_duration_seconds_count"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(Get(metrics_port_, "/proxyMode").empty(), false);

  ASSERT_TRUE(agent->Signal(SIGTERM));
  EXPECT_EQ(agent->Wait(absl::Seconds(10)), 0) << agent->Output();
}

// The first sync runs as soon as every source has delivered, not one --min-sync-period after
// the runner's first (empty) turn: a cold start waits for nothing.
TEST_F(FileSourceIntegrationTest, FirstSyncDoesNotWaitForTheMinSyncPeriod) {
  Write("web.yaml", Service("web", "10.96.0.10", 80) + "---\n" + Slice("web", "10.0.0.1"));
  const absl::Time start = absl::Now();
  auto agent = StartAgent({"--min-sync-period=20s", "--sync-period=30s"});
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"10.0.0.1:8080\""); }, absl::Seconds(15)))
      << agent->Output();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << agent->Output();
  // (That later changes still coalesce within the min period is RunPolicyTest's.)
}

TEST_F(FileSourceIntegrationTest, RepeatedSourcesMergeWithoutLosingOverlaps) {
  const std::string second = dir_ + "/second";
  fs::create_directory(second);
  Write("a.yaml",
        Service("shared", "10.96.0.20", 80) + "---\n" + Service("only-a", "10.96.0.21", 80));
  std::ofstream(second + "/b.yaml")
      << Service("shared", "10.96.0.20", 8080) + "---\n" + Service("only-b", "10.96.0.22", 80);
  auto agent = StartAgent({"--source=file:" + second});
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("demo/only-b"); }, kApply)) << agent->Output();
  EXPECT_TRUE(ServicesContain("demo/only-a"));
  EXPECT_TRUE(ServicesContain("\"servicePort\": 80, ")) << Services();  // the first source wins
  EXPECT_FALSE(ServicesContain("\"servicePort\": 8080"));
  // Removing the shared service from the first source falls back to the second's copy.
  Write("a.yaml", Service("only-a", "10.96.0.21", 80));
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"servicePort\": 8080"); }, kApply))
      << Services();
  EXPECT_TRUE(ServicesContain("demo/shared"));
}

// kube-proxy's command line (cobra under component-base's cli.Run): a bad flag or value prints
// the usage, then "Error: ..." as the last line, exit 1; a configuration rejected after parsing
// is one logged "command failed" line, exit 1; -h among other flags is help, exit 0.
TEST_F(FileSourceIntegrationTest, BadFlagsFailAtStartWithAClearMessage) {
  std::string out;
  EXPECT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--no-such-flag"}, &out), 1);
  const size_t usage = out.find("Usage: sluice-agent [flags]");
  const size_t error = out.find("Error: unknown flag --no-such-flag");
  ASSERT_NE(usage, std::string::npos) << out;
  ASSERT_NE(error, std::string::npos) << out;
  EXPECT_LT(usage, error) << out;
  EXPECT_EQ(testutil::RunCommand(
                {SLUICE_AGENT_BINARY, "--source=file:" + dir_, "--sync-period=often"}, &out),
            1);
  EXPECT_NE(out.find("Error: invalid value \"often\" for flag --sync-period"), std::string::npos)
      << out;
  // Parsed, then rejected by the checks: no usage.
  EXPECT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--source=nowhere:x"}, &out), 1);
  EXPECT_NE(out.find("\"command failed\" err="), std::string::npos) << out;
  EXPECT_EQ(out.find("Usage:"), std::string::npos) << out;
  EXPECT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--help"}, &out), 0);
  EXPECT_NE(out.find("--min-sync-period duration"), std::string::npos) << out;
  EXPECT_EQ(testutil::RunCommand(
                {SLUICE_AGENT_BINARY, "--source=file:" + dir_, "-h", "--sync-period=5s"}, &out),
            0);
  EXPECT_NE(out.find("Usage: sluice-agent [flags]"), std::string::npos) << out;
  EXPECT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--version"}, &out), 0);
  EXPECT_EQ(out, std::string("sluice-agent ") + SLUICE_VERSION + " (kube-proxy v1.31.0)\n");
}

// Called as kube-proxy, --version answers as kube-proxy 1.31 does (scripts take the second
// word), --version=raw as its Go struct, with sluice's version beside both.
TEST_F(FileSourceIntegrationTest, VersionAsKubeProxy) {
  const std::string kube_proxy =
      (fs::path(SLUICE_AGENT_BINARY).parent_path() / "kube-proxy").string();
  std::string out;
  EXPECT_EQ(testutil::RunCommand({kube_proxy, "--version"}, &out), 0);
  EXPECT_EQ(out, std::string("Kubernetes v1.31.0 (sluice ") + SLUICE_VERSION + ")\n");
  EXPECT_EQ(testutil::RunCommand({kube_proxy, "--version=raw"}, &out), 0);
  EXPECT_EQ(out.rfind("version.Info{Major:\"1\", Minor:\"31\", GitVersion:\"v1.31.0\", ", 0), 0u)
      << out;
  EXPECT_NE(out.find(std::string("Compiler:\"sluice ") + SLUICE_VERSION + "\""), std::string::npos)
      << out;
  EXPECT_EQ(testutil::RunCommand({kube_proxy, "--version=bogus"}, &out), 1);
  EXPECT_NE(out.find("Usage: kube-proxy [flags]"), std::string::npos) << out;
  EXPECT_EQ(testutil::RunCommand({kube_proxy, "--hostname-override=n1", "-h"}, &out), 0);
  EXPECT_NE(out.find("  -h, --help\n      help for kube-proxy"), std::string::npos) << out;
}

TEST_F(FileSourceIntegrationTest, TakenAdminPortFailsAtStart) {
  auto first = StartAgent();
  ASSERT_TRUE(WaitFor([&] { return !Services().empty(); }, kApply)) << first->Output();
  auto second = StartAgent();
  EXPECT_EQ(second->Wait(absl::Seconds(10)), 1);
  EXPECT_NE(second->Output().find("listen on 127.0.0.1:"), std::string::npos) << second->Output();
}

TEST_F(FileSourceIntegrationTest, EmptyDirectoryIsHealthy) {
  // No objects is a valid state: the source has synced and the (empty) table is applied.
  auto agent = StartAgent();
  ASSERT_TRUE(WaitFor(
      [&] {
        int status = 0;
        Get(healthz_port_, "/healthz", &status);
        return status == 200;
      },
      kApply))
      << agent->Output();
  int status = 0;
  Get(healthz_port_, "/livez", &status);
  EXPECT_EQ(status, 200);
}

// No API server checks these files, so the agent refuses what it would (and more), naming the
// object and field: a wildcard or loopback listener, a loopback backend without
// --allow-loopback. The rest of the files applies.
TEST_F(FileSourceIntegrationTest, SpecialAddressesAreRefusedWithTheFieldNamed) {
  Write("web.yaml", Service("web", "10.96.0.10", 80) + "---\n" + Slice("web", "10.0.0.1"));
  Write("bad.yaml", Service("loop", "10.96.0.11", 80) + "  externalIPs: [\"127.0.0.1\"]\n---\n" +
                        Service("wild", "0.0.0.0", 80) + "---\n" + Slice("web2", "127.0.0.5"));
  auto agent = StartAgent();
  ASSERT_TRUE(WaitFor([&] { return ServicesContain("\"10.0.0.1:8080\""); }, kApply))
      << agent->Output();
  for (const char* error :
       {"Service demo/loop (document 1): spec.externalIPs[0]: may not be in the loopback range "
        "(127.0.0.0/8, ::1/128), got \"127.0.0.1\"",
        "Service demo/wild (document 2): spec.clusterIP: may not be unspecified, got \"0.0.0.0\"",
        "EndpointSlice demo/web2-1 (document 3): endpoints[0].addresses[0]: may not be in the "
        "loopback range (127.0.0.0/8, ::1/128), got \"127.0.0.5\""}) {
    EXPECT_TRUE(WaitFor([&] { return agent->Output().find(error) != std::string::npos; }, kApply))
        << error << "\n"
        << agent->Output();
  }
  EXPECT_FALSE(ServicesContain("demo/loop"));
  EXPECT_FALSE(ServicesContain("demo/wild"));
  EXPECT_FALSE(ServicesContain("127.0.0.5"));
}

}  // namespace
}  // namespace sluice
