// SPDX-License-Identifier: Apache-2.0
// Which kernel addresses are sluice's, and what Reconcile must change. Pure functions over an
// address dump, so the policy is unit-tested without privileges.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "lib/net/address.h"

#include "agent/dataplane/vip/route_socket.h"

namespace sluice::vip {

// How sluice recognises its own addresses, also after a crash and restart, when its in-memory
// state is gone but the addresses are still in the kernel:
//  - IFA_PROTO = kAddressProtocol on every address it adds, both families. Linux >= 5.18 stores
//    it with the address (the address analogue of a route's rtm_protocol). The kernel uses 1-3
//    (IFAPROT_KERNEL_*); 0x53 ('S') is ours.
//  - IPv4 also gets the label "<ifname>:sluice": older kernels keep it too, and `ip addr` shows
//    it. IPv6 has no labels.
//  - Within one run, the set of addresses it added. This covers IPv6 on kernels older than 5.18,
//    where a restarted sluice then leaves (never removes) its own old IPv6 VIPs.
// A dedicated interface alone would not do: the `lo` fallback is shared with everyone.
inline constexpr uint8_t kAddressProtocol = 0x53;
inline constexpr std::string_view kLabelSuffix = ":sluice";

// The IPv4 label for addresses sluice adds on `ifname`, or "" when "<ifname>:sluice" would not
// fit IFA_LABEL (IFNAMSIZ - 1 = 15 characters).
std::string LabelFor(std::string_view ifname);

// True if `address` carries sluice's mark, or is on the VIP link and in `added`.
bool IsOurs(const KernelAddress& address, int vip_ifindex,
            const absl::flat_hash_set<net::IpAddress>& added);

enum class Presence {
  kOursOnVipLink,  // we added it where it belongs
  kOursElsewhere,  // ours, on another link (an earlier run used another --vip-interface)
  kLocal,          // someone else's address, or loopback: the kernel already delivers it
  kAbsent,
};
Presence Classify(const std::vector<KernelAddress>& current, const net::IpAddress& ip,
                  int vip_ifindex, const absl::flat_hash_set<net::IpAddress>& added);

// The changes that make the kernel hold exactly `wanted` (minus what is local anyway) among our
// addresses. Each list is sorted by address.
struct ReconcilePlan {
  std::vector<net::IpAddress> add;            // to add on the VIP link
  std::vector<KernelAddress> remove;          // ours and stale, on any link
  absl::flat_hash_set<net::IpAddress> owned;  // ours after the plan, if every change succeeds
  std::vector<net::IpAddress> rejected;       // wanted but unusable (0.0.0.0, ::)
};
ReconcilePlan PlanReconcile(const std::vector<KernelAddress>& current,
                            const absl::flat_hash_set<net::IpAddress>& wanted, int vip_ifindex,
                            const absl::flat_hash_set<net::IpAddress>& added);

}  // namespace sluice::vip
