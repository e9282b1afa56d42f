// SPDX-License-Identifier: Apache-2.0
// Strict ARP (issue 26, item 5): a neighbour on the node's LAN must not learn the node's MAC for
// an externalIP, and --cleanup puts back the sysctls the agent raised. The node is the agent's
// test namespace, the LAN a veth pair to a second namespace: the host's sysctls are never read
// or written.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"

namespace sluice::testing {
namespace {

constexpr char kArpIgnore[] = "/proc/sys/net/ipv4/conf/all/arp_ignore";
constexpr char kArpAnnounce[] = "/proc/sys/net/ipv4/conf/all/arp_announce";
constexpr char kNodeLanIp[] = "192.168.77.1";
constexpr char kExternalIp[] = "192.168.77.7";

// Sysctls of the calling thread's network namespace.
std::string ReadSysctl(const char* path) {
  std::ifstream in(path);
  std::string value;
  in >> value;
  return value;
}
void WriteSysctl(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value << std::endl;  // flushed here, so that a refused write shows in good()
  ASSERT_TRUE(out.good()) << path;
}

class StrictArpTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();  // this thread is now in the node's namespace
    if (IsSkipped()) {
      return;
    }
    // As a fresh namespace has them (devconf_inherit_init_net may have copied the host's).
    WriteSysctl(kArpIgnore, "0");
    WriteSysctl(kArpAnnounce, "0");
    auto neighbour = testutil::PeerHost::Create("lan", {absl::StrCat(kNodeLanIp, "/24")},
                                                {"192.168.77.2/24"}, {});
    ASSERT_TRUE(neighbour.ok()) << neighbour.status();
    neighbour_ = std::move(*neighbour);
    // An unanswered request fails after mcast_solicit (3) x retrans_time: 0.3 s, not 3 s.
    ASSERT_EQ(testutil::RunCommand(
                  neighbour_->Exec({"sysctl", "-qw", "net.ipv4.neigh.lan1.retrans_time_ms=100"})),
              0);
    state_dir_ = dir_ + "/.state";  // the fixture's --state-dir
    Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, {{"http", 80}},
                                  absl::StrCat("  externalIPs: [\"", kExternalIp, "\"]\n")) +
                          "---\n" + SliceYaml("web", {"127.0.0.2"}, {{"http", 8080}}));
  }

  void TearDown() override {
    if (agent_ && agent_->running()) {
      agent_->Signal(SIGTERM);
      EXPECT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
    }
    neighbour_.reset();  // before the node's namespace goes
    AgentTest::TearDown();
  }

  bool WaitExternalIpLocal() {
    return testutil::WaitFor(
        [&] {
          std::string addrs;
          testutil::RunCommand({"ip", "-o", "addr", "show"}, &addrs);
          return addrs.find(absl::StrCat(" ", kExternalIp, "/")) != std::string::npos;
        },
        absl::Seconds(10));
  }

  // From the neighbour: resolves `ip` afresh and says whether anyone answered the ARP request.
  // A datagram to `ip` (bash's /dev/udp) makes its kernel ask; the entry then gets a lladdr, or
  // goes FAILED when nobody answers.
  bool NeighbourResolves(const std::string& ip) {
    testutil::RunCommand(neighbour_->Exec({"ip", "neigh", "flush", "dev", "lan1"}));
    EXPECT_EQ(testutil::RunCommand(
                  neighbour_->Exec({"bash", "-c", absl::StrCat("echo x >/dev/udp/", ip, "/9")})),
              0);
    std::string state;
    EXPECT_TRUE(testutil::WaitFor(
        [&] {
          testutil::RunCommand(neighbour_->Exec({"ip", "neigh", "show", "to", ip, "dev", "lan1"}),
                               &state);
          return state.find("lladdr") != std::string::npos ||
                 state.find("FAILED") != std::string::npos;
        },
        absl::Seconds(10)))
        << state;
    return state.find("lladdr") != std::string::npos;
  }

  std::unique_ptr<testutil::PeerHost> neighbour_;
  std::string state_dir_;
};

TEST_F(StrictArpTest, NeighbourGetsNoArpReplyForAnExternalIp) {
  StartAgent();
  ASSERT_TRUE(WaitExternalIpLocal()) << Get("/debug/services");
  ASSERT_TRUE(testutil::WaitFor([] { return ReadSysctl(kArpIgnore) == "1"; }, absl::Seconds(10)))
      << agent_->Output();
  EXPECT_EQ(ReadSysctl(kArpAnnounce), "2");
  EXPECT_TRUE(std::filesystem::exists(state_dir_ + "/strict-arp"));
  EXPECT_TRUE(NeighbourResolves(kNodeLanIp));  // the LAN address itself still answers
  EXPECT_FALSE(NeighbourResolves(kExternalIp));

  // --cleanup restores what the agent changed, and only that: an operator's later
  // arp_announce stays.
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  agent_.reset();
  WriteSysctl(kArpAnnounce, "1");
  std::string out;
  ASSERT_EQ(
      testutil::RunCommand(
          {SLUICE_AGENT_BINARY, "--cleanup", "--bpf-root=", "--state-dir=" + state_dir_}, &out),
      0)
      << out;
  EXPECT_EQ(ReadSysctl(kArpIgnore), "0") << out;
  EXPECT_EQ(ReadSysctl(kArpAnnounce), "1") << out;
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/strict-arp"));
}

// The hole the default closes: without strict ARP the neighbour learns the node's MAC for
// the externalIP (so would every host of the LAN, for every node).
TEST_F(StrictArpTest, WithoutStrictArpTheNodeClaimsTheExternalIp) {
  StartAgent({"--strict-arp=false"});
  ASSERT_TRUE(WaitExternalIpLocal()) << Get("/debug/services");
  EXPECT_TRUE(NeighbourResolves(kExternalIp));
  EXPECT_EQ(ReadSysctl(kArpIgnore), "0");
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/strict-arp"));
}

// A restart finds the sysctls raised by its predecessor: the record keeps the values from
// before sluice, so --cleanup still restores them.
TEST_F(StrictArpTest, RestartKeepsTheOriginalValues) {
  StartAgent();
  ASSERT_TRUE(testutil::WaitFor([] { return ReadSysctl(kArpIgnore) == "1"; }, absl::Seconds(10)))
      << agent_->Output();
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  StartAgent();
  ASSERT_TRUE(WaitExternalIpLocal()) << Get("/debug/services");
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("strict ARP already in place") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  agent_->Signal(SIGTERM);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  agent_.reset();
  std::string out;
  ASSERT_EQ(
      testutil::RunCommand(
          {SLUICE_AGENT_BINARY, "--cleanup", "--bpf-root=", "--state-dir=" + state_dir_}, &out),
      0)
      << out;
  EXPECT_EQ(ReadSysctl(kArpIgnore), "0");
  EXPECT_EQ(ReadSysctl(kArpAnnounce), "0");
}

// A record names its network namespace: one made in another (a test's, a container's) is not
// applied here, nor deleted, nor overwritten.
TEST_F(StrictArpTest, AnotherNamespacesRecordIsLeftAlone) {
  WriteSysctl(kArpIgnore, "1");
  std::filesystem::create_directories(state_dir_);
  std::ofstream(state_dir_ + "/strict-arp") << "netns 1:1\nnet.ipv4.conf.all.arp_ignore 0 1\n";
  std::string out;
  ASSERT_EQ(
      testutil::RunCommand(
          {SLUICE_AGENT_BINARY, "--cleanup", "--bpf-root=", "--state-dir=" + state_dir_}, &out),
      0)
      << out;
  EXPECT_NE(out.find("records sysctls of another network namespace"), std::string::npos) << out;
  EXPECT_EQ(ReadSysctl(kArpIgnore), "1");
  EXPECT_TRUE(std::filesystem::exists(state_dir_ + "/strict-arp"));

  // Nor overwritten by an agent: it refuses strict ARP, saying why, and serves on.
  WriteSysctl(kArpIgnore, "0");
  StartAgent();
  ASSERT_TRUE(WaitExternalIpLocal()) << Get("/debug/services");
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        return agent_->Output().find("give each agent its own --state-dir") != std::string::npos;
      },
      absl::Seconds(10)))
      << agent_->Output();
  EXPECT_EQ(ReadSysctl(kArpIgnore), "0");
  std::ifstream record(state_dir_ + "/strict-arp");
  std::string first_line;
  std::getline(record, first_line);
  EXPECT_EQ(first_line, "netns 1:1");
}

}  // namespace
}  // namespace sluice::testing
