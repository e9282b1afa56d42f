// SPDX-License-Identifier: Apache-2.0
#include "tests/integration/agent_fixture.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "httplib.h"

#include "agent/dataplane/proxy/sockmap_probe.h"
#include "agent/dataplane/socklb/socket_lb.h"

namespace sluice::testing {

namespace fs = std::filesystem;

std::string ServiceYaml(const std::string& name, const std::vector<std::string>& cluster_ips,
                        const std::vector<PortSpec>& ports, const std::string& extra_spec) {
  std::string out = absl::StrCat("apiVersion: v1\nkind: Service\nmetadata:\n  name: ", name,
                                 "\n  namespace: test\nspec:\n");
  if (!cluster_ips.empty()) {
    absl::StrAppend(&out, "  clusterIP: \"", cluster_ips[0], "\"\n");
    if (cluster_ips[0] != "None") {
      absl::StrAppend(&out, "  clusterIPs: [\"", absl::StrJoin(cluster_ips, "\", \""), "\"]\n");
    }
  }
  absl::StrAppend(&out, "  ports:\n");
  for (const auto& p : ports) {
    absl::StrAppend(&out, "  - name: \"", p.name, "\"\n    protocol: ", p.protocol,
                    "\n    port: ", p.port, "\n");
    if (p.node_port > 0) {
      absl::StrAppend(&out, "    nodePort: ", p.node_port, "\n");
    }
  }
  return out + extra_spec;
}

std::string SliceYaml(const std::string& service, const std::vector<std::string>& addresses,
                      const std::vector<PortSpec>& ports, const std::string& address_type) {
  std::string out = absl::StrCat(
      "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: ", service, "-",
      address_type == "IPv4" ? "v4" : "v6", "\n  namespace: test\n  labels:\n",
      "    kubernetes.io/service-name: ", service, "\naddressType: ", address_type,
      "\nendpoints:\n");
  for (const auto& a : addresses) {
    absl::StrAppend(&out, "- addresses: [\"", a, "\"]\n  nodeName: node1\n");
  }
  absl::StrAppend(&out, "ports:\n");
  for (const auto& p : ports) {
    absl::StrAppend(&out, "- name: \"", p.name, "\"\n  protocol: ", p.protocol,
                    "\n  port: ", p.port, "\n");
  }
  return out;
}

void AgentTest::SetUp() {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root for network namespaces and VIPs";
  }
  auto ns = testutil::NetNs::Create();
  if (!ns.ok()) {
    GTEST_SKIP() << "cannot create a network namespace: " << ns.status();
  }
  netns_ = std::move(*ns);
  char tmpl[] = "/tmp/sluice-dp-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  metrics_port_ = testutil::FreePort();
}

void AgentTest::TearDown() {
  if (agent_ && agent_->running()) {
    agent_->Signal(SIGTERM);
    EXPECT_EQ(agent_->Wait(absl::Seconds(10)), 0) << agent_->Output();
  }
  agent_.reset();
  bpffs_.reset();  // unpins: the programs detach from the test cgroup
  cgroup_.reset();
  netns_.reset();
  if (!dir_.empty()) {
    fs::remove_all(dir_);
  }
}

void AgentTest::UseSocketLb() {
  auto cg = testutil::TestCgroup::Create();
  if (!cg.ok()) {
    GTEST_SKIP() << "no test cgroup: " << cg.status();
  }
  cgroup_ = std::move(*cg);
  auto lb = socklb::SocketLb::Create({.cgroup = cgroup_->path(), .bpf_root = ""});
  if (!lb.ok()) {
    GTEST_SKIP() << "socket-level balancing unavailable here: " << lb.status();
  }
  lb->reset();
  auto bpffs = testutil::TestBpfFs::Create();
  ASSERT_TRUE(bpffs.ok()) << bpffs.status();
  bpffs_ = std::move(*bpffs);
  socket_lb_ = true;
}

std::string AgentTest::WantedProxyMode() const {
  const std::string proxy = datapath_.empty() ? "sockmap" : datapath_;
  return socket_lb_ ? proxy + "+socket-lb" : proxy;
}

void AgentTest::UseDatapath(const std::string& path) {
  if (path == "socket-lb") {
    UseSocketLb();
    return;
  }
  if (path == "sockmap") {
    proxy::ProbeResult probe = proxy::ProbeSockmap({.max_connections = 4, .rings = 1});
    if (probe.reason == "permission" || probe.reason == "unsupported") {
      GTEST_SKIP() << "sockmap fast path unavailable here: " << probe.status;
    }
  }
  datapath_ = path;
}

void DatapathTest::SetUp() {
  AgentTest::SetUp();
  if (!IsSkipped()) {
    UseDatapath(GetParam());
  }
}

bool DatapathTest::WaitEnrolled() {
  return !sockmap() ||
         testutil::WaitFor(
             [&] {
               return Get("/debug/connections").find("\"path\": \"sockmap\"") != std::string::npos;
             },
             absl::Seconds(10));
}

void AgentTest::StartAgent(std::vector<std::string> extra, std::vector<std::string> prefix) {
  std::vector<std::string> argv = std::move(prefix);
  for (const std::string& a :
       {std::string(SLUICE_AGENT_BINARY), "--source=file:" + dir_,
        std::string("--healthz-bind-address="),
        absl::StrCat("--metrics-bind-address=127.0.0.1:", metrics_port_),
        std::string("--sync-period=2s"), std::string("--min-sync-period=0s"),
        std::string("--workers=2"), std::string("--hostname-override=node1"),
        // The tests' backends listen on 127.0.0.x, which the API server would refuse.
        std::string("--allow-loopback"),
        // Strict ARP's record (of this namespace's sysctls) stays out of the host's /run.
        "--state-dir=" + dir_ + "/.state"}) {
    argv.push_back(a);
  }
  if (!datapath_.empty()) {
    argv.push_back("--datapath=" + datapath_);
  }
  if (socket_lb_) {
    argv.insert(argv.end(), {"--socket-lb=on", "--socket-lb-cgroup=" + cgroup_->path(),
                             "--bpf-root=" + bpffs_->path()});
  } else {
    // Never the machine's root cgroup, and never the node's pins under /sys/fs/bpf/sluice.
    argv.insert(argv.end(), {"--socket-lb=off", "--bpf-root="});
  }
  // The eBPF NAT of remote clients only where a test asks for it (a later flag wins): it would
  // change which path serves the other tests' off-node clients.
  argv.push_back("--external-datapath=proxy");
  argv.insert(argv.end(), extra.begin(), extra.end());
  agent_ = std::make_unique<testutil::Subprocess>(argv);
  ASSERT_TRUE(testutil::WaitFor([&] { return !Get("/proxyMode").empty() || !agent_->running(); },
                                absl::Seconds(10)));
  ASSERT_TRUE(agent_->running()) << agent_->Output();
}

void AgentTest::Write(const std::string& file, const std::string& yaml) {
  const std::string tmp = dir_ + "/." + file + ".tmp";
  std::ofstream(tmp) << yaml;
  fs::rename(tmp, dir_ + "/" + file);
}

void AgentTest::Remove(const std::string& file) { fs::remove(dir_ + "/" + file); }

std::string AgentTest::Get(const std::string& path, int* status) {
  httplib::Client c("127.0.0.1", metrics_port_);
  c.set_connection_timeout(1, 0);
  auto res = c.Get(path.c_str());
  if (status != nullptr) {
    *status = res ? res->status : -1;
  }
  return res ? res->body : "";
}

namespace {

// Whether some "key": [...] array of `json` holds the string `quoted` (quotes included).
bool InArray(const std::string& json, const std::string& key, const std::string& quoted) {
  const std::string start = "\"" + key + "\": [";
  for (size_t at = json.find(start); at != std::string::npos; at = json.find(start, at + 1)) {
    size_t end = at + start.size();
    for (bool in_string = false; end < json.size() && (in_string || json[end] != ']'); ++end) {
      in_string ^= json[end] == '"';
    }
    if (json.substr(at, end - at).find(quoted) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool AgentTest::WaitListener(const std::string& listener, bool present, absl::Duration timeout) {
  const std::string quoted = "\"" + listener + "\"";
  return testutil::WaitFor(
      [&] {
        const std::string json = Get("/debug/services");
        // Whether this agent balances at the socket (it may have fallen back).
        if (!socket_lb_ || !present || Get("/proxyMode").find("socket-lb") == std::string::npos) {
          return (json.find(quoted) != std::string::npos) == present;
        }
        // Socket LB is programmed before the proxy in a sync, so once the listener (opened
        // only with endpoints) is there, so is the frontend with the same endpoints.
        return InArray(json, "listeners", quoted) && InArray(json, "socketLb", quoted);
      },
      timeout);
}

bool AgentTest::WaitSocketLb(const std::string& frontend) {
  return !socket_lb_ ||
         testutil::WaitFor(
             [&] { return InArray(Get("/debug/services"), "socketLb", "\"" + frontend + "\""); },
             absl::Seconds(10));
}

bool AgentTest::WaitVip(const std::string& ip) {
  return testutil::WaitFor(
      [&] {
        std::string addrs;
        testutil::RunCommand({"ip", "-o", "addr", "show", "dev", "lo"}, &addrs);
        return addrs.find(" " + ip + "/") != std::string::npos;
      },
      absl::Seconds(10));
}

double AgentTest::MetricValue(const std::string& series) {
  std::istringstream in(Metrics());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

}  // namespace sluice::testing
