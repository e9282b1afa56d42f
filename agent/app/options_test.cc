// SPDX-License-Identifier: Apache-2.0
#include "agent/app/options.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace sluice::app {
namespace {

class OptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-options-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Each call starts from fresh options, as a new process would.
  absl::Status Parse(std::vector<std::string> args) {
    opts_ = AgentOptions{};
    flags_ = std::make_unique<base::FlagSet>("sluice-agent");
    RegisterFlags(*flags_, opts_);
    args.insert(args.begin(), "sluice-agent");
    std::vector<char*> argv;
    argv.reserve(args.size());
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    return ParseAgentOptions(static_cast<int>(argv.size()), argv.data(), *flags_, opts_);
  }
  std::string WriteConfig(const std::string& text) {
    std::string path = dir_ + "/config.yaml";
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
  AgentOptions opts_;
  std::unique_ptr<base::FlagSet> flags_;
};

TEST_F(OptionsTest, DefaultsMatchKubeProxy) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_}).ok());
  EXPECT_EQ(opts_.healthz_bind_address, "0.0.0.0:10256");
  EXPECT_EQ(opts_.metrics_bind_address, "127.0.0.1:10249");
  EXPECT_EQ(opts_.sync_period, absl::Seconds(30));
  EXPECT_EQ(opts_.min_sync_period, absl::Seconds(1));
  EXPECT_FALSE(opts_.node_name.empty());
  ASSERT_EQ(opts_.source_specs.size(), 1u);
  EXPECT_EQ(opts_.source_specs[0].path, dir_);
}

TEST_F(OptionsTest, RepeatedSourcesAndHostnameOverride) {
  ASSERT_TRUE(
      Parse({"--source", "file:" + dir_, "--source=file:/tmp", "--hostname-override=n1"}).ok());
  EXPECT_EQ(opts_.source_specs.size(), 2u);
  EXPECT_EQ(opts_.node_name, "n1");
}

TEST_F(OptionsTest, KubeSourceWithKubeconfigAndMaster) {
  ASSERT_TRUE(Parse({"--source=kube", "--kubeconfig=/etc/k.conf", "--master=https://10.0.0.1:6443",
                     "--service-proxy-name=sluice"})
                  .ok());
  ASSERT_EQ(opts_.source_specs.size(), 1u);
  EXPECT_EQ(opts_.source_specs[0].kind, SourceSpec::Kind::kKube);
  EXPECT_EQ(opts_.source_specs[0].ToString(), "kube");
  EXPECT_EQ(opts_.kubeconfig, "/etc/k.conf");
  EXPECT_EQ(opts_.master, "https://10.0.0.1:6443");
  EXPECT_EQ(opts_.service_proxy_name, "sluice");
}

TEST_F(OptionsTest, BadValuesFailWithTheFlagName) {
  absl::Status st = Parse({"--source=file:" + dir_, "--healthz-bind-address=localhost"});
  EXPECT_NE(st.message().find("--healthz-bind-address"), std::string::npos) << st;
  EXPECT_NE(Parse({}).message().find("no --source"), std::string::npos);
  st = Parse({"--source=file:/does/not/exist"});
  EXPECT_NE(st.message().find("/does/not/exist does not exist"), std::string::npos) << st;
  st = Parse({"--source=ftp:x"});
  EXPECT_NE(st.message().find("want file:PATH"), std::string::npos) << st;
  st = Parse({"--source=file:" + dir_, "--min-sync-period=1m", "--sync-period=30s"});
  EXPECT_NE(st.message().find("must not exceed --sync-period"), std::string::npos) << st;
  st = Parse({"--source=file:" + dir_, "--tunnel-stall-timeout=0s"});
  EXPECT_NE(st.message().find("--tunnel-stall-timeout must be positive"), std::string::npos) << st;
}

TEST_F(OptionsTest, TunnelFlowControlFlagsReachTheirFields) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--tunnel-window-extension=false",
                     "--tunnel-stall-timeout=30m", "--tunnel-max-connection-buffer=1048576"})
                  .ok());
  EXPECT_FALSE(opts_.tunnel_window_extension);
  EXPECT_EQ(opts_.tunnel_stall_timeout, absl::Minutes(30));
  EXPECT_EQ(opts_.tunnel_max_connection_buffer, 1 << 20);
}

TEST_F(OptionsTest, StrictArpByDefaultRecordedUnderAnAbsoluteStateDir) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_}).ok());
  EXPECT_TRUE(opts_.strict_arp);
  EXPECT_EQ(opts_.state_dir, "/run/sluice");
  EXPECT_FALSE(opts_.allow_loopback);
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--strict-arp=false", "--allow-loopback"}).ok());
  EXPECT_FALSE(opts_.strict_arp);
  EXPECT_TRUE(opts_.allow_loopback);
  absl::Status st = Parse({"--source=file:" + dir_, "--state-dir=run/sluice"});
  EXPECT_NE(st.message().find("--state-dir must be an absolute path"), std::string::npos) << st;
  // --init-only needs no source: it only raises the sysctls.
  EXPECT_TRUE(Parse({"--init-only"}).ok());
}

TEST_F(OptionsTest, DatapathIsAutoSpliceOrSockmap) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_}).ok());
  EXPECT_EQ(opts_.datapath, "auto");
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--datapath=sockmap"}).ok());
  EXPECT_EQ(opts_.datapath, "sockmap");
  absl::Status st = Parse({"--source=file:" + dir_, "--datapath=ebpf"});
  EXPECT_NE(st.message().find("--datapath"), std::string::npos) << st;
}

TEST_F(OptionsTest, SocketLbMapSizesComeFromFlags) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_}).ok());
  EXPECT_EQ(opts_.socket_lb_max_frontends, 65536);
  EXPECT_EQ(opts_.socket_lb_max_backends, 262144);
  EXPECT_EQ(opts_.socket_lb_max_affinity, 16384);
  ASSERT_TRUE(Parse({"--source=file:" + dir_, "--socket-lb-max-frontends=4096",
                     "--socket-lb-max-backends=16384", "--socket-lb-max-affinity=1024"})
                  .ok());
  EXPECT_EQ(opts_.socket_lb_max_frontends, 4096);
  EXPECT_EQ(opts_.socket_lb_max_backends, 16384);
  EXPECT_EQ(opts_.socket_lb_max_affinity, 1024);
  absl::Status st = Parse({"--source=file:" + dir_, "--socket-lb-max-backends=0"});
  EXPECT_NE(st.message().find("--socket-lb-max-backends must be between 1 and 16777216"),
            std::string::npos)
      << st;
}

TEST_F(OptionsTest, ExternalDatapathFlags) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_}).ok());
  EXPECT_EQ(opts_.external_datapath, "auto");
  EXPECT_EQ(opts_.external_algorithm, "round-robin");
  EXPECT_EQ(opts_.external_max_flows, 262144);
  EXPECT_TRUE(opts_.external_devices.empty());
  ASSERT_TRUE(
      Parse({"--source=file:" + dir_, "--external-datapath=bpf", "--external-devices=eth0,eth1",
             "--external-algorithm=random", "--external-max-flows=1024"})
          .ok());
  EXPECT_EQ(opts_.external_datapath, "bpf");
  EXPECT_EQ(opts_.external_devices, (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(opts_.external_algorithm, "random");
  EXPECT_EQ(opts_.external_max_flows, 1024);
  for (const char* bad : {"--external-datapath=on", "--external-algorithm=lc",
                          "--external-max-flows=1", "--external-devices=a/b"}) {
    absl::Status st = Parse({"--source=file:" + dir_, bad});
    std::string flag(bad, std::string_view(bad).find('='));
    EXPECT_NE(st.message().find(flag), std::string::npos) << bad << ": " << st;
  }
}

TEST_F(OptionsTest, ServiceClusterIpRangeWantsNetworkAddresses) {
  ASSERT_TRUE(
      Parse({"--source=file:" + dir_, "--service-cluster-ip-range=10.96.0.0/12,fd00:96::/108"})
          .ok());
  ASSERT_EQ(opts_.service_cidrs.size(), 2u);
  EXPECT_EQ(opts_.service_cidrs[1].ToString(), "fd00:96::/108");
  absl::Status st = Parse({"--source=file:" + dir_, "--service-cluster-ip-range=10.96.0.1/12"});
  EXPECT_NE(st.message().find("--service-cluster-ip-range"), std::string::npos) << st;
  EXPECT_NE(st.message().find("did you mean 10.96.0.0/12?"), std::string::npos) << st;
  st = Parse({"--source=file:" + dir_, "--service-cluster-ip-range=10.96.0.0"});
  EXPECT_NE(st.message().find("--service-cluster-ip-range"), std::string::npos) << st;
}

TEST_F(OptionsTest, ConfigFileAnySpellingCommandLineWins) {
  std::string cfg = WriteConfig("source:\n  - file:" + dir_ +
                                "\nsyncPeriod: 10s\nmin_sync_period: 2s\nzone: z1\n"
                                "healthz-bind-address: 127.0.0.1:1\n");
  ASSERT_TRUE(Parse({"--config=" + cfg, "--zone=z2"}).ok());
  EXPECT_EQ(opts_.sync_period, absl::Seconds(10));
  EXPECT_EQ(opts_.min_sync_period, absl::Seconds(2));
  EXPECT_EQ(opts_.zone, "z2");
  EXPECT_EQ(opts_.healthz_bind_address, "127.0.0.1:1");
  EXPECT_EQ(opts_.source_specs.size(), 1u);
}

TEST_F(OptionsTest, ConfigFileErrorsNameKeyAndLine) {
  std::string cfg = WriteConfig("zone: z1\nbogus: 1\n");
  absl::Status st = Parse({"--config=" + cfg});
  EXPECT_NE(st.message().find("line 2: unknown key \"bogus\""), std::string::npos) << st;
  cfg = WriteConfig("sync-period: soon\n");
  st = Parse({"--config=" + cfg, "--source=file:" + dir_});
  EXPECT_NE(st.message().find("\"soon\" for flag --sync-period"), std::string::npos) << st;
  cfg = WriteConfig("zone: [unclosed\n");
  EXPECT_FALSE(Parse({"--config=" + cfg}).ok());
}

TEST_F(OptionsTest, TunnelServerAddressesNeedAPort) {
  ASSERT_TRUE(Parse({"--source=file:" + dir_,
                     "--tunnel-server-address=konnectivity.example:8132,[::1]:8132"})
                  .ok());
  EXPECT_EQ(opts_.tunnel_servers,
            (std::vector<std::string>{"konnectivity.example:8132", "[::1]:8132"}));
  for (const char* bad : {"konnectivity.example", ":8132", "h:0", "h:70000", "h:x"}) {
    absl::Status st =
        Parse({"--source=file:" + dir_, std::string("--tunnel-server-address=") + bad});
    EXPECT_NE(st.message().find("--tunnel-server-address"), std::string::npos) << bad << ": " << st;
  }
  EXPECT_NE(Parse({"--source=file:" + dir_, "--tunnel-cert=a.crt"}).message().find("--tunnel-key"),
            std::string::npos);
}

TEST_F(OptionsTest, HelpSkipsValidation) {
  ASSERT_TRUE(Parse({"--help"}).ok());
  EXPECT_TRUE(opts_.standard.help);
  EXPECT_NE(flags_->Help().find("--healthz-bind-address"), std::string::npos);
}

}  // namespace
}  // namespace sluice::app
