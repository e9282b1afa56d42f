// SPDX-License-Identifier: Apache-2.0
// Strict ARP (issue 26, item 5): a neighbour on the node's LAN must not learn the node's MAC for
// an externalIP, and --cleanup puts back the sysctls the agent raised. The node is the agent's
// test namespace, the LAN a veth pair to a second namespace: the host's sysctls are never read
// or written.
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "agent/base/unique_fd.h"
#include "agent/net/address.h"
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
    auto neighbour = testutil::NetNs::Create();  // moves this thread into it
    ASSERT_TRUE(neighbour.ok()) << neighbour.status();
    neighbour_ = std::move(*neighbour);
    const std::string node_ns = absl::StrCat("/proc/", getpid(), "/fd/", netns_->fd());
    for (auto cmd : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", "lan1", "type", "veth", "peer", "name", "lan0", "netns",
              node_ns},
             {"ip", "addr", "add", "192.168.77.2/24", "dev", "lan1"},
             {"ip", "link", "set", "lan1", "up"}}) {
      ASSERT_EQ(testutil::RunCommand(cmd), 0) << absl::StrJoin(cmd, " ");
    }
    // An unanswered request fails after mcast_solicit (3) x retrans_time: 0.3 s, not 3 s.
    WriteSysctl("/proc/sys/net/ipv4/neigh/lan1/retrans_time_ms", "100");
    EnterNode();
    for (auto cmd : std::vector<std::vector<std::string>>{
             {"ip", "addr", "add", absl::StrCat(kNodeLanIp, "/24"), "dev", "lan0"},
             {"ip", "link", "set", "lan0", "up"}}) {
      ASSERT_EQ(testutil::RunCommand(cmd), 0) << absl::StrJoin(cmd, " ");
    }
    state_dir_ = dir_ + "/.state";  // the fixture's --state-dir
    Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, {{"http", 80}},
                                  absl::StrCat("  externalIPs: [\"", kExternalIp, "\"]\n")) +
                          "---\n" + SliceYaml("web", {"127.0.0.2"}, {{"http", 8080}}));
  }

  void TearDown() override {
    if (neighbour_) {
      EnterNode();
      neighbour_.reset();  // moves this thread back to the node's namespace
    }
    AgentTest::TearDown();
  }

  void EnterNode() { ASSERT_EQ(setns(netns_->fd(), CLONE_NEWNET), 0) << strerror(errno); }

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
  // A datagram to `ip` makes the kernel ask; the entry then gets a lladdr or goes FAILED.
  bool NeighbourResolves(const std::string& ip) {
    EXPECT_EQ(setns(neighbour_->fd(), CLONE_NEWNET), 0) << strerror(errno);
    testutil::RunCommand({"ip", "neigh", "flush", "dev", "lan1"});
    {
      base::UniqueFd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
      sockaddr_storage to{};
      const socklen_t len = net::SocketAddress::Parse(absl::StrCat(ip, ":9"))->ToSockaddr(&to);
      EXPECT_GE(sendto(udp.get(), "x", 1, 0, reinterpret_cast<sockaddr*>(&to), len), 0)
          << strerror(errno);
    }
    std::string state;
    EXPECT_TRUE(testutil::WaitFor(
        [&] {
          testutil::RunCommand({"ip", "neigh", "show", "to", ip, "dev", "lan1"}, &state);
          return state.find("lladdr") != std::string::npos ||
                 state.find("FAILED") != std::string::npos;
        },
        absl::Seconds(10)))
        << state;
    EnterNode();
    return state.find("lladdr") != std::string::npos;
  }

  std::unique_ptr<testutil::NetNs> neighbour_;
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

}  // namespace
}  // namespace sluice::testing
