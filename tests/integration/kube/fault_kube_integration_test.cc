// SPDX-License-Identifier: Apache-2.0
// Fault matrix, API server rows: the real sluice-agent (--source=kube) against the test API
// server while its watches are closed, expire, are throttled, fail with 5xx or drop mid-line.
// After each fault the agent must hold exactly the API's state (a service deleted and one added
// during the fault), and a service the fault did not touch must keep answering throughout: a
// relist or re-watch never takes down what did not change. kube_source_test.cc covers the same
// faults at the module level (request order, Retry-After, backoff timing).

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "tests/integration/kube/api_agent_test.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::Hello;
using testutil::TcpServer;
using testutil::WaitFor;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

struct ApiFault {
  std::string name;
  // Control operations (fake_apiserver.py) sent while the API server holds its streams and
  // after the changes were made; the streams are released after them.
  std::vector<std::string> ops;
  bool relists = false;  // the fault forces a relist (the history is gone)
  std::string reason;    // the sluice_source_errors_total reason it must count ("": none)
};

// gtest prints a parameter in test listings and failures: its name, not its bytes.
void PrintTo(const ApiFault& fault, std::ostream* os) { *os << fault.name; }

std::vector<ApiFault> AllApiFaults() {
  const std::string clean = R"({"op":"close_watches","mode":"clean"})";
  const std::string abrupt = R"({"op":"close_watches","mode":"abrupt"})";
  const std::string compact = R"({"op":"compact"})";
  const std::string expire = R"({"op":"close_watches","mode":"expire"})";
  return {
      {.name = "WatchEndsCleanly", .ops = {clean}},
      {.name = "ConnectionDropsBetweenEvents", .ops = {abrupt}, .reason = "connection"},
      // Half of the first held event's line and chunk, then the connection drops.
      {.name = "ConnectionDropsMidLine",
       .ops = {R"({"op":"close_watches","mode":"midline"})"},
       .reason = "connection"},
      {.name = "ExpiredInTheStream",
       .ops = {compact, expire},
       .relists = true,
       .reason = "expired"},
      {.name = "ExpiredAsHttp410",
       .ops = {R"({"op":"gone_mode","value":"http"})", compact, clean},
       .relists = true,
       .reason = "expired"},
      {.name = "ThrottledWithRetryAfter",
       .ops = {R"({"op":"fault","verb":"watch","status":429,"retry_after":1,"count":2})", clean},
       .reason = "throttled"},
      {.name = "ServerErrorsOnWatch",
       .ops = {R"({"op":"fault","verb":"watch","status":500,"count":2})", abrupt},
       .reason = "server_error"},
      // The relist itself fails twice (and the 503 asks for a retry after one second).
      {.name = "ServerErrorsOnRelist",
       .ops = {R"({"op":"fault","verb":"list","status":500})",
               R"({"op":"fault","verb":"list","status":503,"retry_after":1})", compact, expire},
       .relists = true,
       .reason = "server_error"},
      {.name = "ConnectionResetOnReconnect",
       .ops = {R"({"op":"fault","verb":"watch","action":"reset","count":2})", abrupt},
       .reason = "connection"},
  };
}

class KubeFaultTest : public ApiAgentTest, public ::testing::WithParamInterface<ApiFault> {
 protected:
  // Counted for any watch: a fault without a resource may hit this node's Node watch (always
  // running, for KEP-3836), whose reasons read "node_<reason>".
  double Errors(const std::string& reason) {
    double total = 0;
    for (const std::string& r : {reason, "node_" + reason}) {
      total +=
          std::max(0.0, MetricValue(absl::StrCat(
                            R"(sluice_source_errors_total{source="kube",reason=")", r, "\"}")));
    }
    return total;
  }
};

INSTANTIATE_TEST_SUITE_P(Faults, KubeFaultTest, ::testing::ValuesIn(AllApiFaults()),
                         [](const ::testing::TestParamInfo<ApiFault>& info) {
                           return info.param.name;
                         });

TEST_P(KubeFaultTest, ConvergesAndKeepsWhatDidNotChange) {
  const ApiFault& fault = GetParam();
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  auto b = TcpServer::Start(Addr("127.0.0.3:8080"), TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(a && b);
  for (const char* name : {"gone", "kept"}) {
    const std::string ip = name[0] == 'g' ? "10.96.0.11" : "10.96.0.12";
    api_->Put("services", ServiceJson("test", name, ip, 80));
    api_->Put("endpointslices",
              SliceJson("test", name, std::string(name) + "-1", {"127.0.0.2"}, 8080));
  }
  StartAgent(
      {"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"}), "--zone=z"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80")) << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.12:80"));
  const double relists_before = MetricValue(R"(sluice_source_relists_total{source="kube"})");
  auto load = std::make_unique<testutil::HelloLoad>("10.96.0.12:80");
  ASSERT_TRUE(WaitFor([&] { return load->ok > 5; }, absl::Seconds(10)));

  // Changes the agent can only learn through the faulty streams: one service goes, one comes,
  // an endpoint moves.
  api_->Control(R"({"op":"hold","value":true})");
  api_->Delete("services", "test", "gone");
  api_->Delete("endpointslices", "test", "gone-1");
  api_->Put("services", ServiceJson("test", "new", "10.96.0.13", 80));
  api_->Put("endpointslices", SliceJson("test", "new", "new-1", {"127.0.0.3"}, 8080));
  for (const std::string& op : fault.ops) {
    api_->Control(op);
  }
  api_->Control(R"({"op":"hold","value":false})");

  // Backoffs: at most 0.8 s + 1.6 s (two 5xx, jitter <= 1) or two Retry-After seconds.
  ASSERT_TRUE(WaitListener("tcp/10.96.0.13:80", true, absl::Seconds(30))) << agent_->Output();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.11:80", false)) << agent_->Output();
  EXPECT_TRUE(WaitFor([&] { return Hello("10.96.0.13:80") == "b"; }, absl::Seconds(10)));
  int err = 0;
  EXPECT_EQ(Hello("10.96.0.11:80", &err), "");  // the VIP is gone with the service
  const int load_ok = load->ok;
  ASSERT_TRUE(WaitFor([&] { return load->ok > load_ok + 5; }, absl::Seconds(10)));
  const int failed = load->failed;
  load.reset();
  EXPECT_EQ(failed, 0) << "the untouched service stopped answering during the fault";

  const double relists =
      MetricValue(R"(sluice_source_relists_total{source="kube"})") - relists_before;
  if (fault.relists) {
    EXPECT_GE(relists, 1);
  } else {
    EXPECT_EQ(relists, 0) << "a re-watch from the last version needs no relist";
  }
  if (!fault.reason.empty()) {
    EXPECT_GE(Errors(fault.reason), 1) << Metrics();
  }
  // The half-sent line was never taken for an object.
  EXPECT_EQ(Get("/debug/services").find("never-completed"), std::string::npos);
  EXPECT_LE(Errors("malformed_event"), 0) << "a partial line was parsed as an event";
  // And the streams work after the fault.
  api_->Put("endpointslices", SliceJson("test", "kept", "kept-1", {"127.0.0.3"}, 8080));
  EXPECT_TRUE(WaitFor([&] { return Hello("10.96.0.12:80") == "b"; }, absl::Seconds(10)))
      << agent_->Output();
}

// The lowest descriptor number `pid` could open next, once its connections to the admin port
// `admin_port` (the test's last request, which the agent closes when it reads the EOF) are
// closed. A soft RLIMIT_NOFILE set to it leaves no number free: the limit counts descriptor
// numbers, not descriptors, and a count would leave the holes free.
int LowestFreeFd(pid_t pid, int admin_port) {
  const std::string proc = absl::StrCat("/proc/", pid);
  std::set<std::string> closing;  // "socket:[inode]" of admin connections
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 9 && f[3] != "0A" /* LISTEN */ &&
          std::stoi(f[1].substr(f[1].find(':') + 1), nullptr, 16) == admin_port) {
        closing.insert(absl::StrCat("socket:[", f[9], "]"));
      }
    }
  }
  std::set<int> open;
  for (const auto& entry : std::filesystem::directory_iterator(proc + "/fd")) {
    std::error_code ec;
    if (!closing.contains(std::filesystem::read_symlink(entry.path(), ec).string())) {
      open.insert(std::stoi(entry.path().filename().string()));
    }
  }
  int lowest = 0;
  while (open.contains(lowest)) {
    ++lowest;
  }
  return lowest;
}

// Out of descriptors when the API server sends a new service (the soft RLIMIT_NOFILE of the
// running agent lowered to its lowest free descriptor number, so no new descriptor can be
// opened; the event comes over the watch already open): the sync cannot open the listener and is
// retried, the other services stay, and the new one is served once descriptors are available.
TEST_F(ApiAgentTest, OutOfDescriptorsAtSyncRetriesUntilTheyFree) {
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  ASSERT_TRUE(a);
  api_->Put("services", ServiceJson("test", "kept", "10.96.0.12", 80));
  api_->Put("endpointslices", SliceJson("test", "kept", "kept-1", {"127.0.0.2"}, 8080));
  StartAgent(
      {"--source=kube", "--kubeconfig=" + api_->WriteKubeconfig({.ca = "data"}), "--zone=z"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.12:80")) << agent_->Output();
  const std::string pid = absl::StrCat(agent_->pid());
  const int lowest_free = LowestFreeFd(agent_->pid(), metrics_port_);
  // The soft limit only: raising it back needs no CAP_SYS_RESOURCE.
  ASSERT_EQ(
      testutil::RunCommand({"prlimit", "--pid", pid, absl::StrCat("--nofile=", lowest_free, ":")}),
      0);
  api_->Put("services", ServiceJson("test", "new", "10.96.0.13", 80));
  api_->Put("endpointslices", SliceJson("test", "new", "new-1", {"127.0.0.2"}, 8080));
  ASSERT_TRUE(WaitFor(
      [&] {
        return agent_->Output().find("listen tcp/10.96.0.13:80: socket: Too many open files") !=
               std::string::npos;
      },
      absl::Seconds(10)))
      << "the listener did not run out of descriptors\n"
      << agent_->Output();

  std::string out;
  testutil::RunCommand({"prlimit", "--pid", pid, "--nofile", "--noheadings", "--output=HARD"},
                       &out);
  ASSERT_EQ(testutil::RunCommand(
                {"prlimit", "--pid", pid, absl::StrCat("--nofile=", std::stoi(out), ":")}),
            0);
  EXPECT_TRUE(WaitListener("tcp/10.96.0.13:80")) << agent_->Output();
  EXPECT_EQ(Hello("10.96.0.13:80"), "a");
  EXPECT_EQ(Hello("10.96.0.12:80"), "a");
}

}  // namespace
}  // namespace sluice::testing
