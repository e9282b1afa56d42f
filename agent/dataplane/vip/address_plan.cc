// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/address_plan.h"

#include <net/if.h>

#include <algorithm>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::vip {

std::string LabelFor(std::string_view ifname) {
  std::string label = absl::StrCat(base::Absl(ifname), base::Absl(kLabelSuffix));
  return label.size() < IFNAMSIZ ? label : std::string();
}

bool IsOurs(const KernelAddress& address, int vip_ifindex,
            const absl::flat_hash_set<net::IpAddress>& added) {
  if (address.protocol == kAddressProtocol) {
    return true;
  }
  if (address.ip.is_v4() && absl::EndsWith(address.label, base::Absl(kLabelSuffix))) {
    return true;
  }
  return address.ifindex == vip_ifindex && added.contains(address.ip);
}

Presence Classify(const std::vector<KernelAddress>& current, const net::IpAddress& ip,
                  int vip_ifindex, const absl::flat_hash_set<net::IpAddress>& added) {
  // 127.0.0.0/8 is local through the `local 127.0.0.0/8 dev lo` route, not only the addresses
  // assigned; ::1 is assigned to lo and found below anyway.
  Presence presence = ip.IsLoopback() ? Presence::kLocal : Presence::kAbsent;
  for (const KernelAddress& address : current) {
    if (address.ip != ip) {
      continue;
    }
    if (!IsOurs(address, vip_ifindex, added)) {
      presence = Presence::kLocal;
    } else if (address.ifindex == vip_ifindex) {
      return Presence::kOursOnVipLink;
    } else if (presence == Presence::kAbsent) {
      presence = Presence::kOursElsewhere;
    }
  }
  return presence;
}

ReconcilePlan PlanReconcile(const std::vector<KernelAddress>& current,
                            const absl::flat_hash_set<net::IpAddress>& wanted, int vip_ifindex,
                            const absl::flat_hash_set<net::IpAddress>& added) {
  ReconcilePlan plan;
  // Addresses that stay local after the removals: someone else's, and ours that we keep.
  absl::flat_hash_set<net::IpAddress> staying;
  for (const KernelAddress& address : current) {
    if (!IsOurs(address, vip_ifindex, added)) {
      staying.insert(address.ip);
    } else if (address.ifindex == vip_ifindex && wanted.contains(address.ip)) {
      staying.insert(address.ip);
      plan.owned.insert(address.ip);
    } else {
      plan.remove.push_back(address);
    }
  }
  for (const net::IpAddress& ip : wanted) {
    if (ip.IsUnspecified()) {
      plan.rejected.push_back(ip);
    } else if (!ip.IsLoopback() && !staying.contains(ip)) {
      plan.add.push_back(ip);
      plan.owned.insert(ip);
    }
  }
  std::sort(plan.add.begin(), plan.add.end());
  std::sort(plan.rejected.begin(), plan.rejected.end());
  std::sort(plan.remove.begin(), plan.remove.end(),
            [](const KernelAddress& a, const KernelAddress& b) {
              return std::tie(a.ip, a.ifindex) < std::tie(b.ip, b.ifindex);
            });
  return plan;
}

}  // namespace sluice::vip
