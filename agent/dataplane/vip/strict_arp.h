// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/status/status.h"

// Strict ARP for the node's VIPs. VIPs are local addresses, and with the kernel's default
// net.ipv4.conf.all.arp_ignore=0 a node answers ARP on every link for every local address: each
// node then claims every externalIP and LoadBalancer IP on its LAN, which fights MetalLB's L2
// mode and lets an externalIP take over a gateway's address. kube-proxy's IPVS mode has the same
// problem and its strictARP setting sets arp_ignore=1 (answer only for addresses of the link the
// request came in on; VIPs sit on sluice0 or lo, never on the LAN link) and arp_announce=2 (never
// use a VIP as the source of our own ARP requests). IPv6 needs nothing: the kernel answers a
// neighbour solicitation only for addresses of the receiving link (ndisc_recv_ns).
//
// The change outlives the agent, on purpose (a restart must not reopen the hole), so it is not
// an RAII object: the values found before are written to a record file first, and
// RestoreStrictArp (--cleanup) puts back what this code changed, and only that. Both work on the
// network namespace of the calling thread; the record names it, and a record of another
// namespace is never applied. A directory under /run suits the record: it is cleared at boot,
// as the sysctls are.
// Thread: control plane (one caller at a time per record file).

namespace sluice::vip {

// Raises arp_ignore to 1 and arp_announce to 2 where they are lower (a stricter value is left
// as it is), after adding their current values to the record at `record_path` (kept from an
// earlier run of this namespace if there is one). Logs what it changed. Errors name the file;
// FailedPrecondition when the record belongs to another network namespace (left as it is).
absl::Status EnsureStrictArp(const std::string& record_path);

// Sets each sysctl of the record back to its original value if it still holds the value
// EnsureStrictArp wrote (someone else's later change is left alone), then deletes the record.
// No record: nothing to do. Logs what it restored.
absl::Status RestoreStrictArp(const std::string& record_path);

}  // namespace sluice::vip
