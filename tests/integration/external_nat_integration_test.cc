// SPDX-License-Identifier: Apache-2.0
// The eBPF NAT of remote clients (--external-datapath) end to end, in the three-namespace
// topology of external_nat_topology.h (client — node — pod).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"

#include "tests/integration/external_nat_topology.h"
#include "tests/testutil/process.h"

namespace sluice::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// One long TCP connection: a numbered line every 50 ms, each echo checked; prints "ok N" after
// the Nth, and ends after the first exchange once the file argv[3] exists. Any error: "fail".
constexpr char kLongClient[] = R"(
import os, socket, sys, time
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    f = s.makefile("rwb")
    n = 0
    while True:
        done = os.path.exists(sys.argv[3])
        f.write(b"line %d\n" % n)
        f.flush()
        if f.readline() != b"line %d\n" % n:
            raise RuntimeError("bad echo")
        n += 1
        print("ok", n, flush=True)
        if done:
            break
        time.sleep(0.05)
except Exception as e:
    print("fail", e, flush=True)
    sys.exit(1)
)";

// The last "ok N" of kLongClient's output, or 0.
int Exchanges(const std::string& output) {
  int last = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    int n = 0;
    if (absl::ConsumePrefix(&line, "ok ") && absl::SimpleAtoi(line, &n)) {
      last = n;
    }
  }
  return last;
}

// The shared topology plus what these tests check on every frontend, and one long connection.
class ExternalNatTest : public ExternalNatTopology {
 protected:
  void TearDown() override {
    long_client_.reset();  // killed by PID before its namespace goes
    ExternalNatTopology::TearDown();
  }

  // Every frontend of the service from the client: each answer must name `v4` (IPv4 clients)
  // or `v6`, or, when the proxy carries them, either of the node's addresses (it may dial the
  // pod's address of the other family).
  void ExpectServedSeeing(const std::string& v4, const std::string& v6) {
    auto seen = [&](const std::string& want, const std::string& got) {
      return got == want + "\n" ||
             (want == "node" && (got == "10.88.2.2\n" || got == "fd00:88:2::2\n"));
    };
    for (const std::string& url : {Url(kLbV4), Url("10.88.1.2", 30080)}) {
      const std::string got = Curl(url, /*from_client=*/true);
      EXPECT_TRUE(seen(v4, got)) << url << ": " << got;
    }
    for (const std::string& url : {Url(kLbV6), Url("fd00:88:1::2", 30080)}) {
      const std::string got = Curl(url, /*from_client=*/true);
      EXPECT_TRUE(seen(v6, got)) << url << ": " << got;
    }
    for (const auto& [lb, want] : {std::pair{kLbV4, v4}, std::pair{kLbV6, v6}}) {
      const std::string got = Udp(lb);
      EXPECT_TRUE(got.starts_with("from ") && seen(want, got.substr(5))) << lb << ": " << got;
    }
  }

  std::unique_ptr<testutil::Subprocess> long_client_;
};

// eTP Local, and Cluster with its only endpoint here: the kernel translates every frontend
// (LoadBalancer IPs and NodePorts, both families, TCP and UDP) and the pod sees the client.
TEST_F(ExternalNatTest, ThePodSeesTheClientsAddress) {
  StartAgent(Flags("bpf"));
  EXPECT_THAT(Get("/proxyMode"), HasSubstr("+external-bpf")) << agent_->Output();
  for (const char* policy : {"Local", "Cluster"}) {
    SCOPED_TRACE(policy);
    WriteService(policy);
    ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
    ASSERT_TRUE(WaitExternal("tcp/10.88.1.2:30080")) << Get("/debug/services");
    ExpectServedSeeing("10.88.1.1", "fd00:88:1::1");
  }
  EXPECT_GT(MetricValue("sluice_external_nat_flows_total{service_port=\"test/lb:http\"}"), 0);
  EXPECT_GT(MetricValue("sluice_external_nat_packets_total{service_port=\"test/lb:http\"}"), 0);
  EXPECT_EQ(MetricValue("sluice_external_nat_unavailable{reason=\"disabled\"}"), -1);
}

// By default veths (and bridges) are not external devices, and this node's links are all
// veths: the NAT is on but attached nowhere, said in the log, and the proxy serves.
TEST_F(ExternalNatTest, TheDefaultDevicesLeaveOutVeths) {
  StartAgent({"--external-datapath=bpf", "--bpf-root=" + bpffs_->path()});
  EXPECT_THAT(Get("/proxyMode"), HasSubstr("+external-bpf")) << agent_->Output();
  WriteService("Local");
  ASSERT_TRUE(WaitProxy()) << Get("/debug/services");
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("no external devices") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  ExpectServedSeeing("node", "node");
  for (const char* dev : {"nc0", "np0"}) {
    std::string filters;
    testutil::RunCommand({"tc", "filter", "show", "dev", dev, "ingress"}, &filters);
    EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << dev << ": " << filters;
  }
}

// With an endpoint on another node the port stays in the kernel (flows to that endpoint are
// SNATed: external_nat_snat_integration_test.cc).
TEST_F(ExternalNatTest, ARemoteEndpointKeepsThePortInTheKernel) {
  StartAgent(Flags("bpf"));
  WriteService("Cluster");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  std::string remote = SliceYaml("lb", {"10.88.2.1", "10.88.3.9"}, {{"http", 8080}});
  remote.replace(remote.rfind("nodeName: node1"), 15, "nodeName: node2");
  Write("lb-v4.yaml", remote);
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        return Get("/debug/services").find("10.88.3.9") != std::string::npos &&
               ExternalBpf("http").find(kLbV4) != std::string::npos;
      },
      absl::Seconds(10)))
      << Get("/debug/services");
  EXPECT_THAT(ExternalBpf("http"), HasSubstr(absl::StrCat("\"tcp/[", kLbV6, "]:80\"")));
  EXPECT_EQ(Curl(Url(kLbV6), true), "fd00:88:1::1\n");
}

// A node address added at run time: the link watcher has the NodePort served on it in the
// kernel well before the next periodic sync (an hour away here).
TEST_F(ExternalNatTest, ANewNodeAddressIsFollowed) {
  std::vector<std::string> flags = Flags("bpf");
  flags.push_back("--sync-period=1h");
  StartAgent(flags);
  WriteService("Local");
  ASSERT_TRUE(WaitExternal("tcp/10.88.1.2:30080")) << Get("/debug/services");
  EXPECT_THAT(ExternalBpf("http"), Not(HasSubstr("10.88.1.3")));
  ASSERT_EQ(testutil::RunCommand({"ip", "addr", "add", "10.88.1.3/24", "dev", "nc0"}), 0);
  ASSERT_TRUE(WaitExternal("tcp/10.88.1.3:30080")) << Get("/debug/services");
  EXPECT_EQ(Curl(Url("10.88.1.3", 30080), true), "10.88.1.1\n");
}

// --external-datapath=proxy: the same frontends are served by the proxy (the pod sees the
// node), and what an earlier agent left in the kernel is removed.
TEST_F(ExternalNatTest, ProxyModeServesThroughTheProxyAndRemovesTheKernelState) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  ExpectServedSeeing("10.88.1.1", "fd00:88:1::1");
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();

  StartAgent(Flags("proxy"));
  EXPECT_THAT(Get("/proxyMode"), Not(HasSubstr("external"))) << agent_->Output();
  EXPECT_EQ(MetricValue("sluice_external_nat_unavailable{reason=\"disabled\"}"), 1);
  ASSERT_TRUE(WaitProxy()) << Get("/debug/services");
  ExpectServedSeeing("node", "node");
  std::string filters;
  testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", "ingress"}, &filters);
  EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << filters;
}

// --cleanup with the node's bpf root removes the filters from every device and the pins.
TEST_F(ExternalNatTest, CleanupRemovesTheFiltersAndThePins) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  std::string filters;
  testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", "ingress"}, &filters);
  ASSERT_THAT(filters, HasSubstr("sluice")) << "the filters outlive the agent";
  // (The bpffs's own progs.debug and maps.debug are not pins.)
  std::string pins;
  testutil::RunCommand({"find", bpffs_->path(), "-name", "sluice_*"}, &pins);
  ASSERT_NE(pins, "") << "the maps are pinned";
  std::string out;
  ASSERT_EQ(testutil::RunCommand({SLUICE_AGENT_BINARY, "--cleanup", "--bpf-root=" + bpffs_->path(),
                                  "--state-dir=" + dir_ + "/.state"},
                                 &out),
            0)
      << out;
  for (const char* dev : {"nc0", "np0"}) {
    for (const char* dir : {"ingress", "egress"}) {
      testutil::RunCommand({"tc", "filter", "show", "dev", dev, dir}, &filters);
      EXPECT_THAT(filters, Not(HasSubstr("sluice"))) << dev << " " << dir;
    }
  }
  testutil::RunCommand({"find", bpffs_->path(), "-name", "sluice_*"}, &pins);
  EXPECT_EQ(pins, "") << pins;
  // Nothing translates: the LoadBalancer IP is no one's (no agent, no VIP).
  EXPECT_NE(Curl(Url(kLbV4), true), "10.88.1.1\n");
}

// kill -9 with a connection open in the kernel: it goes on while no agent runs and after the
// next one adopted the pinned maps.
TEST_F(ExternalNatTest, AFlowOutlivesTheAgentAndTheNextOneAdoptsIt) {
  StartAgent(Flags("bpf"));
  WriteService("Local");
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  const std::string stop = dir_ + "/stop";
  long_client_ = std::make_unique<testutil::Subprocess>(
      client_->Exec({"python3", "-c", kLongClient, kLbV4, "80", stop}));
  ASSERT_TRUE(
      testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= 5; }, absl::Seconds(10)))
      << long_client_->Output();

  agent_->Signal(SIGKILL);
  agent_->Wait(absl::Seconds(10));
  // No agent: the kernel alone carries it.
  int before = Exchanges(long_client_->Output());
  ASSERT_TRUE(testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= before + 5; },
                                absl::Seconds(10)))
      << long_client_->Output();

  StartAgent(Flags("bpf"));
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("adopted the pinned maps") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  ASSERT_TRUE(WaitExternal(absl::StrCat("tcp/", kLbV4, ":80"))) << Get("/debug/services");
  before = Exchanges(long_client_->Output());
  ASSERT_TRUE(testutil::WaitFor([&] { return Exchanges(long_client_->Output()) >= before + 5; },
                                absl::Seconds(10)))
      << long_client_->Output();
  EXPECT_EQ(Curl(Url(kLbV4), true), "10.88.1.1\n") << "new flows are translated too";
  testutil::RunCommand({"touch", stop});
  EXPECT_EQ(long_client_->Wait(absl::Seconds(10)), 0) << long_client_->Output();
  EXPECT_THAT(long_client_->Output(), Not(HasSubstr("fail")));
}

}  // namespace
}  // namespace sluice::testing
