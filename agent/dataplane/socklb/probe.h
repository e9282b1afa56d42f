// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"

#include "agent/dataplane/socklb/socket_lb.h"

namespace sluice::socklb {

// Whether this node uses socket-level balancing, decided once at start.
struct ProbeResult {
  std::unique_ptr<SocketLb> lb;  // null when unavailable
  // Why not, for sluice_socket_lb_unavailable{reason}: "permission" (capabilities), "cgroup"
  // (no cgroup v2, or not its root), "unsupported" (kernel lacks a hook or helper), "bpffs"
  // or "self_test".
  std::string reason;
  absl::Status status;  // the cause, for the log line and for --socket-lb=on's exit
};

// Checks capabilities and the cgroup, loads and attaches the programs (adopting pinned ones),
// and runs SelfTest when this process is itself under the cgroup. `options.cgroup` empty means
// the cgroup v2 root, which must then be the real root of the hierarchy. Without a result,
// whatever an earlier agent pinned under `options.bpf_root` is detached and removed (the
// fallback of --socket-lb=auto must not leave stale hooks translating). Thread: control plane,
// at start.
ProbeResult ProbeSocketLb(SocketLb::Options options);

// Programs a throwaway TCP and UDP service on 127.255.255.254 with a loopback backend and
// checks, from this process, that connect() reaches the backend, getpeername() and recvfrom()
// report the service address, and a service without backends refuses with ECONNREFUSED.
absl::Status SelfTest(SocketLb& lb);

}  // namespace sluice::socklb
