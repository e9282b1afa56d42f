// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/netlink_vip_manager.h"

#include <linux/if_addr.h>
#include <linux/rtnetlink.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/strings.h"

#include "agent/dataplane/vip/address_plan.h"

namespace sluice::vip {

namespace {

constexpr char kLoopback[] = "lo";

// Keeps the first of several errors and counts them, for best-effort loops.
class ErrorTally final {
 public:
  void Add(absl::Status status) {
    if (!status.ok() && failed_++ == 0) {
      first_ = std::move(status);
    }
  }
  absl::Status Result(std::string_view op) const {
    if (failed_ == 0) {
      return absl::OkStatus();
    }
    return absl::Status(first_.code(),
                        absl::StrCat(base::Absl(op), ": ", failed_,
                                     " change(s) failed, first: ", first_.message()));
  }

 private:
  int failed_ = 0;
  absl::Status first_;
};

// The default VIP link: our dummy link, created if missing, else lo. A kernel built without
// CONFIG_DUMMY (the project's development VMs run one) answers EOPNOTSUPP once
// request_module("rtnl-link-dummy") fails; iproute2 prints that as "Unknown device type".
absl::StatusOr<std::string> ChooseDefaultInterface(RouteSocket& socket) {
  const std::string dummy = NetlinkVipManager::kDefaultInterface;
  absl::StatusOr<int> existing = socket.LinkIndex(dummy);
  if (existing.ok()) {
    return dummy;
  }
  if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  absl::Status added = socket.AddLink(dummy, "dummy");
  if (added.ok()) {
    LOG(INFO) << "created dummy link " << dummy << " for service VIPs";
    return dummy;
  }
  if (absl::IsAlreadyExists(added)) {  // Created concurrently since the lookup.
    return dummy;
  }
  if (absl::IsUnimplemented(added)) {
    LOG(WARNING) << "the kernel has no dummy link type (" << added.message()
                 << "); service VIPs go on " << kLoopback;
    return std::string(kLoopback);
  }
  return added;
}

}  // namespace

NetlinkVipManager::NetlinkVipManager(std::unique_ptr<RouteSocket> socket,
                                     std::string interface_name, int ifindex,
                                     std::vector<net::Cidr> local_ranges)
    : socket_(std::move(socket)),
      interface_name_(std::move(interface_name)),
      ifindex_(ifindex),
      label_(LabelFor(interface_name_)),
      local_ranges_(std::move(local_ranges)) {}

NetlinkVipManager::~NetlinkVipManager() = default;

absl::StatusOr<std::unique_ptr<NetlinkVipManager>> NetlinkVipManager::Create(
    std::string interface_name, std::vector<net::Cidr> local_ranges) {
  for (const net::Cidr& range : local_ranges) {
    if (!(range.Network() == range)) {
      return absl::InvalidArgumentError(absl::StrCat("local range ", range.ToString(),
                                                     " has host bits set; did you mean ",
                                                     range.Network().ToString(), "?"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RouteSocket> socket, RouteSocket::Create());
  if (interface_name.empty()) {
    ASSIGN_OR_RETURN(interface_name, ChooseDefaultInterface(*socket));
  }
  absl::StatusOr<int> ifindex = socket->LinkIndex(interface_name);
  if (!ifindex.ok()) {
    return base::Annotate(ifindex.status(), "VIP interface");
  }
  ASSIGN_OR_RETURN(bool was_down, socket->SetUp(interface_name));
  if (was_down) {
    LOG(INFO) << "VIP interface " << interface_name << " was down; set it up";
  }
  if (LabelFor(interface_name).empty()) {
    LOG(WARNING) << "VIP interface name " << interface_name
                 << " is too long for an IPv4 address label; VIPs are marked by IFA_PROTO only";
  }
  LOG(INFO) << "service VIPs go on " << interface_name << " (ifindex " << *ifindex << ")";
  auto manager = std::unique_ptr<NetlinkVipManager>(new NetlinkVipManager(
      std::move(socket), std::move(interface_name), *ifindex, std::move(local_ranges)));
  RETURN_IF_ERROR(manager->InstallLocalRanges());
  return manager;
}

absl::Status NetlinkVipManager::InstallLocalRanges() {
  ASSIGN_OR_RETURN(auto existing, socket_->DumpLocalRoutes(kAddressProtocol));
  ErrorTally errors;
  for (const auto& [ifindex, range] : existing) {
    const bool wanted = ifindex == ifindex_ && std::find(local_ranges_.begin(), local_ranges_.end(),
                                                         range) != local_ranges_.end();
    if (!wanted) {
      absl::Status st = socket_->DeleteLocalRoute(ifindex, range, kAddressProtocol);
      if (st.ok()) {
        LOG(INFO) << "removed the local route for " << range.ToString() << " of an earlier run";
      }
      errors.Add(absl::IsNotFound(st) ? absl::OkStatus() : st);
    }
  }
  for (const net::Cidr& range : local_ranges_) {
    absl::Status st = socket_->AddLocalRoute(ifindex_, range, kAddressProtocol);
    if (st.ok()) {
      LOG(INFO) << "VIPs in " << range.ToString() << " are local through one route on "
                << interface_name_;
    }
    errors.Add(absl::IsAlreadyExists(st) ? absl::OkStatus() : st);
  }
  return errors.Result("install local routes");
}

bool NetlinkVipManager::InLocalRange(const net::IpAddress& ip) const {
  return std::any_of(local_ranges_.begin(), local_ranges_.end(),
                     [&](const net::Cidr& range) { return range.Contains(ip); });
}

absl::Status NetlinkVipManager::Ensure(const net::IpAddress& ip) {
  if (ip.IsUnspecified()) {
    return absl::InvalidArgumentError(absl::StrCat("ensure VIP ", ip.ToString(), ": unspecified"));
  }
  if (InLocalRange(ip)) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<KernelAddress> current, socket_->DumpAddresses());
  const Presence presence = Classify(current, ip, ifindex_, owned_);
  switch (presence) {
    case Presence::kOursOnVipLink:
    case Presence::kOursElsewhere:  // Adopted; the next Reconcile scans and moves it.
      stale_ = stale_ || presence == Presence::kOursElsewhere;
      owned_.insert(ip);
      return absl::OkStatus();
    case Presence::kLocal:
      owned_.erase(ip);
      VLOG(2) << "VIP " << ip.ToString() << " is already local; not adding it";
      return absl::OkStatus();
    case Presence::kAbsent:
      break;
  }
  ASSIGN_OR_RETURN(bool added, Add(ip));
  if (added) {
    owned_.insert(ip);
  }
  return absl::OkStatus();
}

absl::Status NetlinkVipManager::Release(const net::IpAddress& ip) {
  ASSIGN_OR_RETURN(std::vector<KernelAddress> current, socket_->DumpAddresses());
  for (const KernelAddress& address : current) {
    if (address.ip == ip && IsOurs(address, ifindex_, owned_)) {
      RETURN_IF_ERROR(Delete(address));
    }
  }
  owned_.erase(ip);
  return absl::OkStatus();
}

absl::Status NetlinkVipManager::Reconcile(const absl::flat_hash_set<net::IpAddress>& wanted) {
  // A dump of every address costs O(all addresses) per sync (~10k VIPs at scale), so only the
  // periodic resync, the first call and the one after a failure read the kernel.
  const bool scan = std::exchange(stale_, false);
  absl::Status status = scan ? ReconcileWithKernel(wanted) : ReconcileOwned(wanted);
  if (!status.ok()) {
    stale_ = true;  // our view may be wrong: the next sync scans
  }
  return status;
}

absl::Status NetlinkVipManager::ReconcileWithKernel(
    const absl::flat_hash_set<net::IpAddress>& wanted) {
  ASSIGN_OR_RETURN(std::vector<KernelAddress> current, socket_->DumpAddresses());
  // VIPs in a local range need no address, and lose one an earlier run gave them. Scans are
  // rare (start, resync, after an error), so the filtered copy costs no sync anything.
  absl::flat_hash_set<net::IpAddress> outside;
  if (!local_ranges_.empty()) {
    for (const net::IpAddress& ip : wanted) {
      if (!InLocalRange(ip)) {
        outside.insert(ip);
      }
    }
  }
  const auto& need = local_ranges_.empty() ? wanted : outside;
  foreign_.clear();
  for (const KernelAddress& address : current) {
    if (!IsOurs(address, ifindex_, owned_)) {
      foreign_.insert(address.ip);
    }
  }
  ReconcilePlan plan = PlanReconcile(current, need, ifindex_, owned_);
  ErrorTally errors;
  for (const net::IpAddress& ip : plan.rejected) {
    errors.Add(absl::InvalidArgumentError(absl::StrCat("VIP ", ip.ToString(), ": unspecified")));
  }
  // Adds before removals: a VIP moving from an old interface to the VIP link stays reachable.
  int added = 0;
  for (const net::IpAddress& ip : plan.add) {
    absl::StatusOr<bool> result = Add(ip);
    if (result.ok() && *result) {
      ++added;
      continue;
    }
    plan.owned.erase(ip);
    errors.Add(result.status());
  }
  int removed = 0;
  for (const KernelAddress& address : plan.remove) {
    absl::Status result = Delete(address);
    if (result.ok()) {
      ++removed;
    } else if (address.ifindex == ifindex_) {
      plan.owned.insert(address.ip);  // Still there and still ours; the next sync retries.
    }
    errors.Add(std::move(result));
  }
  owned_ = std::move(plan.owned);
  if (added > 0 || removed > 0) {
    LOG(INFO) << "VIPs on " << interface_name_ << ": " << added << " added, " << removed
              << " removed, " << owned_.size() << " owned";
  }
  return errors.Result("reconcile VIPs");
}

absl::Status NetlinkVipManager::ReconcileOwned(const absl::flat_hash_set<net::IpAddress>& wanted) {
  // owned_ holds no VIP in a local range: the scan that preceded this dropped them.
  std::vector<net::IpAddress> remove;
  for (const net::IpAddress& ip : owned_) {
    if (!wanted.contains(ip)) {
      remove.push_back(ip);
    }
  }
  return ChangeOwned(std::vector<net::IpAddress>(wanted.begin(), wanted.end()), std::move(remove));
}

absl::Status NetlinkVipManager::Update(const std::vector<net::IpAddress>& add,
                                       const std::vector<net::IpAddress>& remove) {
  absl::Status status = ChangeOwned(add, remove);
  if (!status.ok()) {
    stale_ = true;  // our view may be wrong: the next Reconcile scans
  }
  return status;
}

absl::Status NetlinkVipManager::ChangeOwned(std::vector<net::IpAddress> add,
                                            std::vector<net::IpAddress> remove) {
  ErrorTally errors;
  std::erase_if(add, [&](const net::IpAddress& ip) {
    if (ip.IsUnspecified()) {
      errors.Add(absl::InvalidArgumentError(absl::StrCat("VIP ", ip.ToString(), ": unspecified")));
      return true;
    }
    return owned_.contains(ip) || foreign_.contains(ip) || ip.IsLoopback() || InLocalRange(ip);
  });
  std::erase_if(remove, [&](const net::IpAddress& ip) { return !owned_.contains(ip); });
  std::sort(add.begin(), add.end());
  std::sort(remove.begin(), remove.end());
  // Adds before removals, as in ReconcileWithKernel. Everything in owned_ is on the VIP link: an
  // address adopted from elsewhere marks the manager stale (Ensure), so a scan moves it first.
  for (const net::IpAddress& ip : add) {
    absl::StatusOr<bool> result = Add(ip);
    if (result.ok() && *result) {
      owned_.insert(ip);
    } else if (result.ok()) {
      foreign_.insert(ip);  // appeared meanwhile: someone else's
    } else {
      errors.Add(result.status());
    }
  }
  for (const net::IpAddress& ip : remove) {
    absl::Status result = Delete(KernelAddress{ip, ifindex_, ip.is_v4() ? 32 : 128});
    if (result.ok()) {
      owned_.erase(ip);
    }
    errors.Add(std::move(result));
  }
  if (!add.empty() || !remove.empty()) {
    VLOG(1) << "VIPs on " << interface_name_ << ": " << add.size() << " to add, " << remove.size()
            << " to remove, " << owned_.size() << " owned";
  }
  return errors.Result("reconcile VIPs");
}

absl::Status NetlinkVipManager::RemoveAll() {
  ASSIGN_OR_RETURN(std::vector<KernelAddress> current, socket_->DumpAddresses());
  ErrorTally errors;
  absl::flat_hash_set<net::IpAddress> remaining;
  for (const KernelAddress& address : current) {
    if (!IsOurs(address, ifindex_, owned_)) {
      continue;
    }
    absl::Status result = Delete(address);
    if (!result.ok()) {
      remaining.insert(address.ip);
    }
    errors.Add(std::move(result));
  }
  owned_ = std::move(remaining);
  for (const net::Cidr& range : local_ranges_) {
    absl::Status st = socket_->DeleteLocalRoute(ifindex_, range, kAddressProtocol);
    errors.Add(absl::IsNotFound(st) ? absl::OkStatus() : st);
  }
  return errors.Result("remove all VIPs");
}

absl::StatusOr<bool> NetlinkVipManager::Add(const net::IpAddress& ip) {
  const int prefix_len = ip.is_v4() ? 32 : 128;
  AddressOptions options;
  options.label = label_;
  options.protocol = kAddressProtocol;
  // Scope host (IPv4; IPv6 derives scope from the address and ignores this). The kernel delivers
  // to a local address whatever its scope: the `local` route in table local decides, so pods
  // routed through the node still reach the VIP (checked from a second netns over veth). What
  // the scope changes is source selection: inet_select_addr() never picks a host-scope address
  // for traffic leaving the node, and a VIP that every node shares must not become one.
  options.scope = RT_SCOPE_HOST;
  // Every node holds the same VIP, so Duplicate Address Detection on a link that does it (a NIC
  // given as --vip-interface) would fail it, and even a passing DAD leaves the address tentative
  // for about a second, with bind() failing EADDRNOTAVAIL. lo and dummy links skip DAD anyway
  // (IFF_LOOPBACK, IFF_NOARP: addrconf_dad_begin()).
  options.flags = ip.is_v4() ? 0 : IFA_F_NODAD;
  absl::Status status = socket_->AddAddress(ifindex_, ip, prefix_len, options);
  if (absl::IsAlreadyExists(status)) {
    LOG(WARNING) << "VIP " << ip.ToString() << " appeared on " << interface_name_
                 << " while sluice was adding it; leaving it to its owner";
    return false;
  }
  RETURN_IF_ERROR(status);
  VLOG(2) << "added VIP " << ip.ToString() << "/" << prefix_len << " on " << interface_name_;
  return true;
}

absl::Status NetlinkVipManager::Delete(const KernelAddress& address) {
  absl::Status status = socket_->DeleteAddress(address);
  if (absl::IsNotFound(status)) {
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(status);
  VLOG(2) << "removed VIP " << address.ip.ToString() << "/" << address.prefix_len << " (ifindex "
          << address.ifindex << ")";
  return absl::OkStatus();
}

}  // namespace sluice::vip
