// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/net/address.h"

#include "agent/dataplane/vip/route_socket.h"
#include "agent/dataplane/vip/vip_manager.h"

namespace sluice::vip {

// VipManager over rtnetlink (libnl-route). Owns a NETLINK_ROUTE socket, bound to the network
// namespace of the thread that calls Create(), and the in-memory set of VIPs it owns. Addresses
// go on one link: --vip-interface, or by default a dummy link "sluice0" (created if missing, like
// kube-proxy's kube-ipvs0), or `lo` when the kernel has no dummy link type. How it tells its own
// addresses apart, across restarts too, is described in address_plan.h.
// Thread: control plane, one caller at a time.
class NetlinkVipManager final : public VipManager {
 public:
  static constexpr char kDefaultInterface[] = "sluice0";

  // `interface_name` must name an existing link; empty selects the default described above. The
  // link is set up if it is down: IPv6 addresses stay tentative, hence unusable, on a down link.
  // `local_ranges` (e.g. the service CIDRs) are made local with one `local` route each instead
  // of an address per VIP: VIPs inside them get no address. Adding 10,000 addresses to one link
  // costs the kernel seconds (each insert walks the link's list), a route costs nothing per VIP.
  // Create installs them and removes such routes of an earlier run that are no longer wanted.
  static absl::StatusOr<std::unique_ptr<NetlinkVipManager>> Create(
      std::string interface_name, std::vector<net::Cidr> local_ranges = {});
  // Leaves every address in place (see VipManager). RemoveAll() is the clean-shutdown path.
  ~NetlinkVipManager() override;

  // VipManager
  absl::Status Ensure(const net::IpAddress& ip) override;
  absl::Status Release(const net::IpAddress& ip) override;
  absl::Status Reconcile(const absl::flat_hash_set<net::IpAddress>& wanted) override;
  absl::Status Update(const std::vector<net::IpAddress>& add,
                      const std::vector<net::IpAddress>& remove) override;
  absl::Status RemoveAll() override;
  void MarkStale() override { stale_ = true; }
  const absl::flat_hash_set<net::IpAddress>& Owned() const override { return owned_; }
  std::string interface_name() const override { return interface_name_; }

 private:
  NetlinkVipManager(std::unique_ptr<RouteSocket> socket, std::string interface_name, int ifindex,
                    std::vector<net::Cidr> local_ranges);

  // Converges the kernel's local routes of ours on local_ranges_.
  absl::Status InstallLocalRanges();
  bool InLocalRange(const net::IpAddress& ip) const;

  // Reconcile against a dump of the kernel's addresses.
  absl::Status ReconcileWithKernel(const absl::flat_hash_set<net::IpAddress>& wanted);
  // Reconcile against owned_ and foreign_ alone: no dump.
  absl::Status ReconcileOwned(const absl::flat_hash_set<net::IpAddress>& wanted);
  // Adds `add` (checked against owned_ and foreign_) and removes `remove` (ours only), sorted.
  absl::Status ChangeOwned(std::vector<net::IpAddress> add, std::vector<net::IpAddress> remove);
  // Adds ip on the VIP link. Returns false if it appeared there since the dump (someone else's).
  absl::StatusOr<bool> Add(const net::IpAddress& ip);
  // Deletes one of our addresses; an address that is already gone counts as deleted.
  absl::Status Delete(const KernelAddress& address);

  std::unique_ptr<RouteSocket> socket_;
  const std::string interface_name_;
  const int ifindex_;
  const std::string label_;  // IPv4 IFA_LABEL, "" if the name is too long for one.
  const std::vector<net::Cidr> local_ranges_;
  absl::flat_hash_set<net::IpAddress> owned_;
  // Someone else's local addresses as of the last full scan: never added, never owned.
  absl::flat_hash_set<net::IpAddress> foreign_;
  bool stale_ = true;  // the next Reconcile scans the kernel
};

}  // namespace sluice::vip
