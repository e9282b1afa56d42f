// SPDX-License-Identifier: Apache-2.0
#include "agent/app/kube_proxy_config.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "agent/app/options.h"

namespace sluice::app {
namespace {

class KubeProxyConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-kpc-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::Status Parse(std::vector<std::string> args, const std::string& program = "sluice-agent") {
    opts_ = AgentOptions{};
    flags_ = std::make_unique<base::FlagSet>(program);
    RegisterFlags(*flags_, opts_);
    args.insert(args.begin(), "/usr/local/bin/" + program);
    std::vector<char*> argv;
    argv.reserve(args.size());
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    return ParseAgentOptions(static_cast<int>(argv.size()), argv.data(), *flags_, opts_);
  }
  // A KubeProxyConfiguration with `body` (YAML lines) after the header.
  std::string Kpc(const std::string& body, const std::string& name = "config.conf") {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
                           "kind: KubeProxyConfiguration\n"
                        << body;
    return path;
  }
  std::string NotApplied() const { return absl::StrJoin(opts_.kube_proxy.not_applied, "\n"); }

  std::string dir_;
  AgentOptions opts_;
  std::unique_ptr<base::FlagSet> flags_;
};

// kubeadm's default config.conf as 1.26 and 1.30 write it, with kubeadm's usual arguments.
TEST_F(KubeProxyConfigTest, KubeadmDefaultFilesStartWithKubeProxysArguments) {
  for (const char* file : {"kubeadm-1.26-config.conf", "kubeadm-1.30-config.conf"}) {
    SCOPED_TRACE(file);
    ASSERT_TRUE(Parse({std::string("--config=") + SLUICE_TEST_DATA + "/" + file,
                       "--hostname-override=Node-1"},
                      "kube-proxy")
                    .ok());
    ASSERT_EQ(opts_.source_specs.size(), 1u);  // no --source: kube, as kube-proxy
    EXPECT_EQ(opts_.source_specs[0].kind, SourceSpec::Kind::kKube);
    EXPECT_EQ(opts_.kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf");
    EXPECT_EQ(opts_.node_name, "node-1");
    // Empty addresses and zero periods in the file mean kube-proxy's defaults.
    EXPECT_EQ(opts_.healthz_bind_address, "0.0.0.0:10256");
    EXPECT_EQ(opts_.metrics_bind_address, "127.0.0.1:10249");
    EXPECT_EQ(opts_.sync_period, absl::Seconds(30));
    EXPECT_EQ(opts_.min_sync_period, absl::Seconds(1));
    EXPECT_EQ(opts_.udp_idle_timeout, absl::Seconds(30));
    EXPECT_EQ(opts_.kube_proxy.oom_score_adj, -999);
    EXPECT_TRUE(opts_.nodeport_addresses.empty());
    // Only the one field kubeadm sets that sluice does not use is reported.
    ASSERT_EQ(opts_.kube_proxy.not_applied.size(), 1u) << NotApplied();
    EXPECT_TRUE(absl::StrContains(NotApplied(), "--cluster-cidr (clusterCIDR)")) << NotApplied();
  }
}

TEST_F(KubeProxyConfigTest, UnknownFieldsAndVersionsAreErrorsWithFileLineAndKey) {
  std::string path = Kpc("mode: ipvs\niptables:\n  syncPeriod: 10s\n  flushPeriod: 1s\n");
  absl::Status st = Parse({"--config=" + path});
  EXPECT_EQ(st.message(), "--config " + path +
                              ": line 6: unknown field \"iptables.flushPeriod\" in "
                              "KubeProxyConfiguration")
      << st;
  st = Parse({"--config=" + Kpc("linux:\n  masqueradeAll: true\n")});
  EXPECT_TRUE(absl::StrContains(st.message(), "line 3: unknown field \"linux\"")) << st;
  st = Parse({"--config=" + Kpc("iptables: 5\n")});
  EXPECT_TRUE(absl::StrContains(st.message(), "iptables: want a mapping")) << st;
  st = Parse({"--config=" + Kpc("iptables:\n  syncPeriod: often\n")});
  EXPECT_TRUE(absl::StrContains(st.message(),
                                "line 4: iptables.syncPeriod: invalid value "
                                "\"often\" for flag --iptables-sync-period"))
      << st;
  const std::string v2 = dir_ + "/v2.conf";
  std::ofstream(v2) << "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: "
                       "KubeProxyConfiguration\n";
  st = Parse({"--config=" + v2});
  EXPECT_TRUE(absl::StrContains(st.message(),
                                "apiVersion \"kubeproxy.config.k8s.io/v1alpha2\" is "
                                "not supported"))
      << st;
}

// Each field with a sluice meaning lands there; each without one is reported.
TEST_F(KubeProxyConfigTest, EveryFieldIsMappedOrReported) {
  struct Case {
    std::string yaml;
    std::function<void(const AgentOptions&)> check;  // mapped fields
    std::string reported;                            // or: a substring of the report
  };
  const std::vector<Case> cases = {
      {"featureGates:\n  Foo: true\n  Bar: false\n", nullptr, "--feature-gates (featureGates)"},
      {"clientConnection:\n  kubeconfig: /k.conf\n",
       [](const AgentOptions& o) { EXPECT_EQ(o.kubeconfig, "/k.conf"); }, ""},
      {"clientConnection:\n  qps: 50\n", nullptr, "--kube-api-qps"},
      {"clientConnection:\n  burst: 100\n", nullptr, "--kube-api-burst"},
      {"clientConnection:\n  contentType: application/json\n", nullptr, "--kube-api-content-type"},
      {"clientConnection:\n  acceptContentTypes: application/json\n", nullptr,
       "clientConnection.acceptContentTypes=application/json has no effect"},
      {"logging:\n  format: json\n", nullptr, "--logging-format"},
      {"logging:\n  flushFrequency: 1000000000\n", nullptr, "--log-flush-frequency"},
      {"logging:\n  verbosity: 4\n", [](const AgentOptions& o) { EXPECT_EQ(o.klog.v, 4); }, ""},
      {"logging:\n  vmodule:\n  - filePattern: proxier*\n    verbosity: 5\n",
       // klog's unsupported flags are reported at start by base::WarnIgnoredFlags.
       [](const AgentOptions& o) { EXPECT_EQ(o.klog.vmodule, "proxier*=5"); }, ""},
      {"logging:\n  options:\n    json:\n      splitStream: true\n", nullptr,
       "--log-json-split-stream"},
      {"logging:\n  options:\n    json:\n      infoBufferSize: 1Mi\n", nullptr,
       "--log-json-info-buffer-size"},
      {"logging:\n  options:\n    text:\n      splitStream: true\n", nullptr,
       "--log-text-split-stream"},
      {"logging:\n  options:\n    text:\n      infoBufferSize: 1Mi\n", nullptr,
       "--log-text-info-buffer-size"},
      {"hostnameOverride: n7\n", [](const AgentOptions& o) { EXPECT_EQ(o.node_name, "n7"); }, ""},
      {"bindAddress: 10.1.2.3\nnodePortAddresses: [primary, localhost]\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.nodeport_addresses,
                   (std::vector<std::string>{"10.1.2.3/32", "127.0.0.0/8", "::1/128"}));
       },
       ""},
      {"bindAddress: \"fd00::1\"\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.healthz_bind_address, "[::]:10256");
         EXPECT_EQ(o.metrics_bind_address, "[::1]:10249");
       },
       ""},
      {"healthzBindAddress: 127.0.0.1\nmetricsBindAddress: 0.0.0.0:9999\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.healthz_bind_address, "127.0.0.1:10256");
         EXPECT_EQ(o.metrics_bind_address, "0.0.0.0:9999");
       },
       ""},
      {"bindAddressHardFail: true\n", nullptr, "--bind-address-hard-fail"},
      {"enableProfiling: true\n", nullptr, "--profiling"},
      {"showHiddenMetricsForVersion: \"1.29\"\n", nullptr, "--show-hidden-metrics-for-version"},
      {"mode: iptables\niptables:\n  syncPeriod: 10s\n  minSyncPeriod: 2s\nipvs:\n  "
       "syncPeriod: 1m\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.sync_period, absl::Seconds(10));
         EXPECT_EQ(o.min_sync_period, absl::Seconds(2));
       },
       "mode \"iptables\" selects no data path"},
      {"mode: ipvs\niptables:\n  syncPeriod: 10s\nipvs:\n  syncPeriod: 1m\n  minSyncPeriod: 5s\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.sync_period, absl::Minutes(1));
         EXPECT_EQ(o.min_sync_period, absl::Seconds(5));
       },
       "mode \"ipvs\" selects no data path"},
      {"mode: nftables\niptables:\n  syncPeriod: 10s\nnftables:\n  syncPeriod: 20s\n  "
       "minSyncPeriod: 3s\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.sync_period, absl::Seconds(20));
         EXPECT_EQ(o.min_sync_period, absl::Seconds(3));
       },
       "mode \"nftables\" selects no data path"},
      {"iptables:\n  masqueradeBit: 0\n", nullptr, "--iptables-masquerade-bit"},
      {"iptables:\n  masqueradeAll: true\n", nullptr, "--masquerade-all"},
      {"iptables:\n  localhostNodePorts: false\n", nullptr, "--iptables-localhost-nodeports"},
      {"iptables:\n  snatNodeInternalIP: true\n", nullptr, "iptables.snatNodeInternalIP=true"},
      {"ipvs:\n  scheduler: lc\n", nullptr, "--ipvs-scheduler"},
      {"ipvs:\n  excludeCIDRs: [10.0.0.0/8]\n", nullptr, "--ipvs-exclude-cidrs"},
      {"ipvs:\n  strictARP: true\n", nullptr, "--ipvs-strict-arp"},
      {"ipvs:\n  tcpTimeout: 5m\n", nullptr, "--ipvs-tcp-timeout"},
      {"ipvs:\n  tcpFinTimeout: 5m\n", nullptr, "--ipvs-tcpfin-timeout"},
      {"ipvs:\n  udpTimeout: 5m\n", nullptr, "--ipvs-udp-timeout"},
      {"nftables:\n  masqueradeBit: 3\n", nullptr, "nftables.masqueradeBit=3"},
      {"nftables:\n  masqueradeAll: true\n", nullptr, "nftables.masqueradeAll=true"},
      {"winkernel:\n  networkName: l2bridge\n", nullptr, "winkernel.networkName=l2bridge"},
      {"winkernel:\n  sourceVip: 10.0.0.1\n", nullptr, "winkernel.sourceVip"},
      {"winkernel:\n  enableDSR: true\n", nullptr, "winkernel.enableDSR"},
      {"winkernel:\n  rootHnsEndpointName: cbr0\n", nullptr, "winkernel.rootHnsEndpointName"},
      {"winkernel:\n  forwardHealthCheckVip: true\n", nullptr, "winkernel.forwardHealthCheckVip"},
      {"windowsRunAsService: true\n", nullptr, "windowsRunAsService"},
      {"detectLocalMode: InterfaceNamePrefix\n", nullptr, "--detect-local-mode"},
      {"detectLocal:\n  bridgeInterface: cbr0\n", nullptr, "--pod-bridge-interface"},
      {"detectLocal:\n  interfaceNamePrefix: veth\n", nullptr, "--pod-interface-name-prefix"},
      {"clusterCIDR: 10.244.0.0/16\n", nullptr, "--cluster-cidr"},
      {"nodePortAddresses: [10.0.0.0/8]\n",
       [](const AgentOptions& o) {
         ASSERT_EQ(o.nodeport_cidrs.size(), 1u);
         EXPECT_EQ(o.nodeport_cidrs[0].ToString(), "10.0.0.0/8");
       },
       ""},
      {"oomScoreAdj: 0\n", [](const AgentOptions& o) { EXPECT_EQ(o.kube_proxy.oom_score_adj, 0); },
       ""},
      {"conntrack:\n  maxPerCore: 0\n", nullptr, "--conntrack-max-per-core"},
      {"conntrack:\n  min: 5\n", nullptr, "--conntrack-min"},
      // The eBPF NAT of remote clients ages its flows by these.
      {"conntrack:\n  tcpEstablishedTimeout: 1h\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.kube_proxy.conntrack_tcp_timeout_established, absl::Hours(1));
       },
       ""},
      {"conntrack:\n  tcpCloseWaitTimeout: 1m\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.kube_proxy.conntrack_tcp_timeout_close_wait, absl::Minutes(1));
       },
       ""},
      {"conntrack:\n  tcpBeLiberal: true\n", nullptr, "--conntrack-tcp-be-liberal"},
      {"conntrack:\n  udpTimeout: 30s\n",
       [](const AgentOptions& o) {
         EXPECT_EQ(o.kube_proxy.conntrack_udp_timeout, absl::Seconds(30));
       },
       ""},
      {"conntrack:\n  udpStreamTimeout: 2m\n", nullptr, "--conntrack-udp-timeout-stream"},
      {"configSyncPeriod: 1m\n", nullptr, "--config-sync-period"},
      {"portRange: 30000-31000\n", nullptr, "--proxy-port-range"},
      {"udpIdleTimeout: 90s\n",
       [](const AgentOptions& o) { EXPECT_EQ(o.udp_idle_timeout, absl::Seconds(90)); }, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    absl::Status st = Parse({"--config=" + Kpc(c.yaml), "--source=file:" + dir_});
    ASSERT_TRUE(st.ok()) << st;
    if (c.check) {
      c.check(opts_);
    }
    if (c.reported.empty()) {
      EXPECT_TRUE(opts_.kube_proxy.not_applied.empty()) << NotApplied();
    } else {
      EXPECT_TRUE(absl::StrContains(NotApplied(), c.reported)) << NotApplied();
    }
  }
}

// Every kube-proxy flag of 1.26-1.33 (and klog's) is accepted; those without a sluice meaning
// are reported when set to something other than their default (klog's unsupported ones by
// base::WarnIgnoredFlags at start, see klog_test.cc, so never in not_applied).
TEST_F(KubeProxyConfigTest, EveryKubeProxyFlagIsAccepted) {
  const std::vector<std::pair<std::string, bool>> flags = {
      // flag=value, reported
      {"--feature-gates=Foo=true,Bar=false", true},
      {"--kube-api-content-type=application/json", true},
      {"--kube-api-qps=50", true},
      {"--kube-api-burst=100", true},
      {"--bind-address=10.0.0.1", false},
      {"--bind-address-hard-fail", true},
      {"--profiling", true},
      {"--show-hidden-metrics-for-version=1.29", true},
      {"--init-only", false},
      {"--proxy-mode=ipvs", true},
      {"--iptables-masquerade-bit=13", true},
      {"--masquerade-all", true},
      {"--iptables-localhost-nodeports=false", true},
      {"--iptables-sync-period=10s", false},
      {"--iptables-min-sync-period=2s", false},
      {"--ipvs-sync-period=10s", false},
      {"--ipvs-min-sync-period=2s", false},
      {"--ipvs-scheduler=lc", true},
      {"--ipvs-exclude-cidrs=10.0.0.0/8", true},
      {"--ipvs-strict-arp", true},
      {"--ipvs-tcp-timeout=1m", true},
      {"--ipvs-tcpfin-timeout=1m", true},
      {"--ipvs-udp-timeout=1m", true},
      {"--detect-local-mode=ClusterCIDR", true},
      {"--pod-bridge-interface=cbr0", true},
      {"--pod-interface-name-prefix=veth", true},
      {"--cluster-cidr=10.244.0.0/16", true},
      {"--nodeport-addresses=10.0.0.0/8", false},
      {"--oom-score-adj=-500", false},
      {"--conntrack-max-per-core=0", true},
      {"--conntrack-min=1", true},
      {"--conntrack-tcp-timeout-established=1h", false},
      {"--conntrack-tcp-timeout-close-wait=1m", false},
      {"--conntrack-tcp-be-liberal", true},
      {"--conntrack-udp-timeout=30s", false},
      {"--conntrack-udp-timeout-stream=2m", true},
      {"--config-sync-period=1m", true},
      {"--healthz-port=12345", false},
      {"--metrics-port=12346", false},
      {"--proxy-port-range=30000-31000", true},
      {"--udp-timeout=1s", false},
      {"--azure-container-registry-config=/etc/acr.json", true},
      {"--logging-format=json", true},
      {"--log-flush-frequency=1s", true},
      {"--log-json-split-stream", true},
      {"--log-json-info-buffer-size=1Mi", true},
      {"--log-text-split-stream", true},
      {"--log-text-info-buffer-size=1Mi", true},
      {"--kubeconfig=/k.conf", false},
      {"--master=https://10.0.0.1:6443", false},
      {"--hostname-override=n1", false},
      {"--healthz-bind-address=0.0.0.0:10256", false},
      {"--metrics-bind-address=127.0.0.1:10249", false},
      {"--write-config-to=" + dir_ + "/out.yaml", false},
      {"--cleanup", false},
      {"--v=2", false},
      {"--vmodule=proxier=4", false},
      {"--logtostderr=true", false},
      {"--alsologtostderr", false},
      {"--log-dir=/tmp", false},
      {"--log-file=/tmp/kp.log", false},
      {"--log-file-max-size=10", false},
      {"--skip-headers", false},
      {"--skip-log-headers", false},
      {"--add-dir-header", false},
      {"--one-output", false},
      {"--stderrthreshold=1", false},
      {"--log-backtrace-at=proxier.go:10", false},
  };
  for (const auto& [flag, reported] : flags) {
    SCOPED_TRACE(flag);
    absl::Status st = Parse({"--source=file:" + dir_, flag});
    ASSERT_TRUE(st.ok()) << st;
    const std::string name = flag.substr(2, flag.find('=') - 2);
    EXPECT_EQ(absl::StrContains(NotApplied(), "--" + name), reported) << NotApplied();
  }
  EXPECT_FALSE(Parse({"--source=file:" + dir_, "--feature-gates=Foo"}).ok());
  EXPECT_FALSE(Parse({"--source=file:" + dir_, "--oom-score-adj=2000"}).ok());
  EXPECT_FALSE(Parse({"--source=file:" + dir_, "--bind-address=node"}).ok());
}

TEST_F(KubeProxyConfigTest, DeprecatedPortFlagsAndTheirInteractionWithConfig) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--healthz-port=0", "--metrics-port=0"}).ok());
  EXPECT_EQ(opts_.healthz_bind_address, "");  // 0 disables, as in kube-proxy
  EXPECT_EQ(opts_.metrics_bind_address, "");
  ASSERT_TRUE(
      Parse({"--source=file:" + dir_, "--healthz-bind-address=127.0.0.1", "--healthz-port=12345"})
          .ok());
  EXPECT_EQ(opts_.healthz_bind_address, "127.0.0.1:12345");
  // With --config the deprecated ports are ignored, and reported.
  ASSERT_TRUE(Parse({"--config=" + Kpc(""), "--healthz-port=0"}).ok());
  EXPECT_EQ(opts_.healthz_bind_address, "0.0.0.0:10256");
  EXPECT_TRUE(absl::StrContains(NotApplied(), "--healthz-port is ignored")) << NotApplied();
}

// As kube-proxy: the file replaces the flags bound to its fields; logging flags,
// --hostname-override and sluice's own flags still apply.
TEST_F(KubeProxyConfigTest, FileOverridesKubeProxyFlagsButNotOthers) {
  ASSERT_TRUE(Parse({"--config=" + Kpc("metricsBindAddress: 127.0.0.1:20249\n"),
                     "--metrics-bind-address=0.0.0.0:1", "--healthz-bind-address=0.0.0.0:2",
                     "--proxy-mode=ipvs", "--v=3", "--hostname-override=h", "--socket-lb=off",
                     "--sync-period=45s"})
                  .ok());
  EXPECT_EQ(opts_.metrics_bind_address, "127.0.0.1:20249");
  EXPECT_EQ(opts_.healthz_bind_address, "0.0.0.0:10256");  // the file's default, not the flag
  EXPECT_EQ(opts_.kube_proxy.proxy_mode, "");
  EXPECT_EQ(opts_.klog.v, 3);
  EXPECT_EQ(opts_.node_name, "h");
  EXPECT_EQ(opts_.socket_lb, "off");
  EXPECT_EQ(opts_.sync_period, absl::Seconds(45));
  for (const char* flag : {"--metrics-bind-address", "--healthz-bind-address", "--proxy-mode"}) {
    EXPECT_TRUE(absl::StrContains(NotApplied(), std::string(flag) + " is ignored: the --config"))
        << NotApplied();
  }
  EXPECT_FALSE(absl::StrContains(NotApplied(), "--v ")) << NotApplied();
}

// --write-config-to writes what sluice runs with; reading it back gives the same settings.
TEST_F(KubeProxyConfigTest, WrittenConfigurationReadsBackTheSame) {
  const std::string in =
      Kpc("bindAddress: 10.0.0.5\nhealthzBindAddress: 10.0.0.5:1\nmetricsBindAddress: "
          "10.0.0.5:2\nhostnameOverride: w1\nclientConnection:\n  kubeconfig: /k\n  qps: 7\n"
          "iptables:\n  syncPeriod: 40s\n  minSyncPeriod: 3s\n  masqueradeAll: true\n"
          "nodePortAddresses: [10.0.0.0/8]\noomScoreAdj: -10\nfeatureGates:\n  Foo: true\n"
          "logging:\n  verbosity: 2\nconntrack:\n  maxPerCore: 0\n");
  const std::string out = dir_ + "/written.yaml";
  ASSERT_TRUE(Parse({"--config=" + in, "--write-config-to=" + out}).ok());
  ASSERT_TRUE(WriteKubeProxyConfiguration(opts_, out).ok());
  const AgentOptions first = opts_;
  ASSERT_TRUE(Parse({"--config=" + out}).ok());
  EXPECT_EQ(opts_.healthz_bind_address, first.healthz_bind_address);
  EXPECT_EQ(opts_.metrics_bind_address, first.metrics_bind_address);
  EXPECT_EQ(opts_.node_name, "w1");
  EXPECT_EQ(opts_.kubeconfig, "/k");
  EXPECT_EQ(opts_.sync_period, absl::Seconds(40));
  EXPECT_EQ(opts_.min_sync_period, absl::Seconds(3));
  EXPECT_EQ(opts_.nodeport_addresses, first.nodeport_addresses);
  EXPECT_EQ(opts_.kube_proxy.oom_score_adj, -10);
  EXPECT_EQ(opts_.kube_proxy.kube_api_qps, 7);
  EXPECT_EQ(opts_.kube_proxy.masquerade_all, true);
  EXPECT_EQ(opts_.kube_proxy.feature_gates, "Foo=true");
  EXPECT_EQ(opts_.kube_proxy.conntrack_max_per_core, 0);
  EXPECT_EQ(opts_.klog.v, 2);
  EXPECT_EQ(opts_.kube_proxy.not_applied, first.kube_proxy.not_applied);
}

TEST_F(KubeProxyConfigTest, SourceDefaultsToKubeOnlyForKubeProxyUse) {
  EXPECT_FALSE(Parse({}).ok());  // plain sluice-agent still asks for a source
  ASSERT_TRUE(Parse({}, "kube-proxy").ok());
  EXPECT_EQ(opts_.source_specs[0].kind, SourceSpec::Kind::kKube);
  ASSERT_TRUE(Parse({"--kubeconfig=/k"}).ok());
  EXPECT_EQ(opts_.source_specs[0].kind, SourceSpec::Kind::kKube);
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--kubeconfig=/k"}).ok());
  EXPECT_EQ(opts_.source_specs[0].kind, SourceSpec::Kind::kFile);
}

TEST_F(KubeProxyConfigTest, OomScoreAdjIsWritten) {
  std::ifstream in("/proc/self/oom_score_adj");
  int64_t before = 0;
  in >> before;
  ASSERT_TRUE(ApplyOomScoreAdj(before + 1).ok());  // raising it needs no privilege
  std::ifstream again("/proc/self/oom_score_adj");
  int64_t after = 0;
  again >> after;
  EXPECT_EQ(after, before + 1);
}

}  // namespace
}  // namespace sluice::app
