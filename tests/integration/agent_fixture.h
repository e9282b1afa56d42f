// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"

#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"

namespace sluice::testing {

struct PortSpec {
  std::string name;
  int port = 0;
  std::string protocol = "TCP";
  int node_port = 0;
};

// YAML for a Service (extra_spec is appended under spec:, indented by two spaces).
std::string ServiceYaml(const std::string& name, const std::vector<std::string>& cluster_ips,
                        const std::vector<PortSpec>& ports, const std::string& extra_spec = "");
// YAML for an EndpointSlice of `service` with ready endpoints on `addresses`.
std::string SliceYaml(const std::string& service, const std::vector<std::string>& addresses,
                      const std::vector<PortSpec>& ports, const std::string& address_type = "IPv4");

// Runs the real sluice-agent inside a fresh network namespace owned by the test thread: every
// address, VIP and process of the test lives and dies with it. Skips without root.
class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Runs the agent with --datapath=`path` from now on. For "sockmap", skips the test when this
  // machine cannot load the fast path (no CAP_BPF/CAP_NET_ADMIN, or an old kernel).
  // "socket-lb" is the third path: UseSocketLb() with the proxy on its default.
  void UseDatapath(const std::string& path);
  // Runs the agent with --socket-lb=on from now on, attached to a test cgroup this process
  // (and so every client it runs) is moved into, pinning to a private bpffs. Skips the test
  // when this machine cannot load the programs. Without it the agent gets --socket-lb=off.
  void UseSocketLb();
  // Starts sluice-agent on the manifest directory with test-friendly periods.
  void StartAgent(std::vector<std::string> extra_flags = {}, std::vector<std::string> prefix = {});
  // Writes a manifest file atomically (rename), as an editor or ConfigMap update would.
  void Write(const std::string& file, const std::string& yaml);
  void Remove(const std::string& file);
  std::string Get(const std::string& path, int* status = nullptr);
  // Waits until /debug/services lists (or no longer lists) a listener such as "tcp/10.96.0.10:80";
  // with socket LB on, until its socketLb frontends (do not) include that address.
  bool WaitListener(const std::string& listener, bool present = true,
                    absl::Duration timeout = absl::Seconds(10));
  // With socket LB on, waits until a frontend ("udp/10.96.0.30:53") is programmed, even one
  // that refuses (no endpoints, so no listener); otherwise returns true at once.
  bool WaitSocketLb(const std::string& frontend);
  // Waits until `ip` is on the node's lo (a VIP is added in the sync after it is listed).
  bool WaitVip(const std::string& ip);
  std::string Metrics() { return Get("/metrics"); }
  // Returns the value of an unlabelled or fully labelled metric line, or -1.
  double MetricValue(const std::string& series);

  // What /proxyMode says for the path in use.
  std::string WantedProxyMode() const;
  // The socket-LB counter of a service port ("test/web:http"), or -1.
  double SocketLbTranslations(const std::string& service_port) {
    return MetricValue("sluice_socket_lb_translations_total{service=\"" + service_port + "\"}");
  }

  std::unique_ptr<testutil::NetNs> netns_;
  std::unique_ptr<testutil::TestCgroup> cgroup_;
  std::unique_ptr<testutil::TestBpfFs> bpffs_;
  bool socket_lb_ = false;
  std::unique_ptr<testutil::Subprocess> agent_;
  std::string dir_;
  std::string datapath_;  // empty: the agent's default
  int metrics_port_ = 0;
};

// Fixtures whose every test runs on the three data paths (splice, sockmap, socket-lb): instantiate
// with INSTANTIATE_TEST_SUITE_P(Paths, Fixture, ::testing::ValuesIn(kDatapaths), DatapathName).
class DatapathTest : public AgentTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override;
  bool sockmap() const { return GetParam() == "sockmap"; }
  bool socket_lb() const { return GetParam() == "socket-lb"; }
  // On the sockmap path, waits until a connection is in the kernel: the agent enrols a
  // connection once it has been quiet for 50 ms (SockmapPromotion), so a test that wants the
  // kernel to carry a bulk transfer connects, waits here, then sends. True on other paths.
  bool WaitEnrolled();
};
inline const std::vector<std::string> kDatapaths = {"splice", "sockmap", "socket-lb"};
inline std::string DatapathName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;  // gtest names allow no '-': "socket-lb" -> "socket_lb"
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace sluice::testing
