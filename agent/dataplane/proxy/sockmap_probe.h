// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"

#include "agent/dataplane/fastpath/sockmap_fast_path.h"

namespace sluice::proxy {

// Whether this node can use the sockmap fast path, decided once at start.
struct ProbeResult {
  std::unique_ptr<fastpath::SockmapFastPath> fast_path;  // null when unavailable
  // Why not, for sluice_sockmap_unavailable{reason}: "permission" (capabilities),
  // "unsupported" (kernel lacks a map type, program type or helper) or "self_test".
  std::string reason;
  absl::Status status;  // the cause, for the log line and for --datapath=sockmap's exit
};

// Checks capabilities, loads the program and maps, and runs SockmapSelfTest. Blocks for at
// most a few seconds. Thread: control plane, at start.
ProbeResult ProbeSockmap(const fastpath::SockmapFastPath::Options& options);

// Proxies one loopback TCP connection with the workers' own code (a TcpSession enrolled at
// once, its SockmapSession and relays, a FlowRing) on an EventLoop of its own: bytes sent
// before insertion, both directions, flow-control signals up to a pause, the pass and resume,
// and the FIN each way after draining; then checks the bytes and the counters. Uses ring
// index 0 while it runs. Thread: any but a worker's.
absl::Status SockmapSelfTest(fastpath::SockmapFastPath& fast_path);

}  // namespace sluice::proxy
