// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"

namespace sluice::testing {

// The LoadBalancer IPs of WriteService's service.
inline constexpr char kLbV4[] = "10.77.0.1";
inline constexpr char kLbV6[] = "fd00:77::1";

// "http://ip:port/", brackets around an IPv6 address.
std::string Url(const std::string& ip, int port = 80);

// AgentTest for the eBPF NAT of remote clients: skips where the agent's self-test says this
// machine cannot run it (any other failure fails), mounts a bpffs for --bpf-root and lets the
// test thread's namespace (the node) forward. Derived fixtures make `client_`.
class ExternalNatTest : public AgentTest {
 protected:
  void SetUp() override;

  // curl's body (from the client host if `from_client`, else from the node), or "exit N".
  std::string Curl(const std::string& url, bool from_client = false);

  std::unique_ptr<testutil::PeerHost> client_;
};

// The eBPF NAT of remote clients (--external-datapath) end to end: the test thread's namespace
// is the node (the agent runs there), a client host and a pod host hang off it on veths, and
// the node routes between them:
//
//   client 10.88.1.1 / fd00:88:1::1 ── node 10.88.1.2 | 10.88.2.2 ── pod 10.88.2.1 / fd00:88:2::1
//
// The pod runs one dual-stack backend on all its addresses: on TCP 8080 an HTTP answer naming
// the peer's address (or, for GET /who, "<its own address> <peer>"), or, for a connection that
// starts with anything else, a line echo (the line "who" answered as GET /who's body); on UDP
// 5353 "from <peer>" (the datagram "who": "<its own address> <peer>"), from the address asked. The
// peer is the client's own address when the kernel translates, the node's (10.88.2.2) when the
// proxy carries the connection. Skips where the agent's self-test says the machine cannot run the
// NAT.
class ExternalNatTopology : public ExternalNatTest {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The client-facing device is named: a veth, which the default selection leaves out.
  std::vector<std::string> Flags(const std::string& mode);

  // A LoadBalancer service "lb": TCP 80 (NodePort 30080) and UDP 53, both families, its one
  // endpoint in the pod on this node.
  void WriteService(const std::string& policy);
  // Its EndpointSlices: ready endpoints on these pod addresses, all on this node.
  void WriteSlices(const std::vector<std::string>& v4, const std::vector<std::string>& v6);
  // The `externalBpf` list of test/lb's `port` in /debug/services ("" when absent).
  std::string ExternalBpf(const std::string& port);
  // Waits until /debug/services lists `frontend` ("tcp/10.77.0.1:80") as served by the NAT.
  bool WaitExternal(const std::string& frontend, const std::string& port = "http");
  // Waits until the proxy listens on the LoadBalancer IP (its path when the NAT is off).
  bool WaitProxy();

  // One UDP query from the client host to `ip`:53: the reply, or "exit N" when none came.
  std::string Udp(const std::string& ip);

  std::unique_ptr<testutil::PeerHost> pod_;
  std::unique_ptr<testutil::Subprocess> backend_;
};

}  // namespace sluice::testing
