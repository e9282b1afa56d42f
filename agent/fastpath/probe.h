// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"

#include "agent/fastpath/sockmap_fast_path.h"

namespace sluice::fastpath {

// Whether this node can use the sockmap fast path, decided once at start.
struct ProbeResult {
  std::unique_ptr<SockmapFastPath> fast_path;  // null when unavailable
  // Why not, for sluice_sockmap_unavailable{reason}: "permission" (capabilities),
  // "unsupported" (kernel lacks a map type, program type or helper) or "self_test".
  std::string reason;
  absl::Status status;  // the cause, for the log line and for --datapath=sockmap's exit
};

// Checks capabilities, loads the program and maps, and runs SelfTest. Blocks for at most a
// few seconds. Thread: control plane, at start.
ProbeResult ProbeSockmap(const SockmapFastPath::Options& options);

// Proxies one loopback TCP connection through the kernel the way workers do: bytes sent
// before insertion, both directions, a flow-control signal, a pause (pass) and resume, and
// FIN each way after draining; then checks the byte counters. Uses ring index 0 while it runs.
absl::Status SelfTest(SockmapFastPath& fast_path);

}  // namespace sluice::fastpath
