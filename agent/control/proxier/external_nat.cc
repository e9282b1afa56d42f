// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/external_nat.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_join.h"
#include "lib/base/log.h"
#include "lib/base/unique_fd.h"

#include "agent/control/proxier/data_path.h"
#include "agent/control/proxier/port_counters.h"

namespace sluice::proxier {

std::vector<std::string> SelectNodeDevices(const std::vector<NodeLink>& links,
                                           const std::vector<net::Cidr>& cidrs,
                                           const absl::flat_hash_set<net::IpAddress>& exclude) {
  std::vector<std::string> out;
  for (const NodeLink& link : links) {
    if (link.driver == "veth" || link.driver == "bridge") {
      continue;
    }
    const bool wanted = std::any_of(
        link.addresses.begin(), link.addresses.end(),
        [&](const net::IpAddress& ip) { return IsNodePortAddress(ip, cidrs, exclude); });
    if (wanted && std::find(out.begin(), out.end(), link.name) == out.end()) {
      out.push_back(link.name);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> NodeDevices(const std::vector<net::Cidr>& cidrs,
                                     const absl::flat_hash_set<net::IpAddress>& exclude) {
  // The driver by ethtool, on a socket of this thread's namespace (sysfs may show another's).
  base::UniqueFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  std::map<std::string, NodeLink> links;
  ForEachLocalAddress([&](const char* ifname, unsigned flags, const net::IpAddress& ip) {
    if ((flags & IFF_LOOPBACK) != 0) {
      return;
    }
    auto [it, added] = links.try_emplace(ifname);
    if (added) {
      it->second.name = ifname;
      ethtool_drvinfo info{};
      info.cmd = ETHTOOL_GDRVINFO;
      ifreq ifr{};
      strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
      ifr.ifr_data = reinterpret_cast<char*>(&info);
      if (sock && ioctl(sock.get(), SIOCETHTOOL, &ifr) == 0) {
        it->second.driver.assign(info.driver, strnlen(info.driver, sizeof(info.driver)));
      }
    }
    it->second.addresses.push_back(ip);
  });
  std::vector<NodeLink> all;
  all.reserve(links.size());
  for (auto& [name, link] : links) {
    all.push_back(std::move(link));
  }
  return SelectNodeDevices(all, cidrs, exclude);
}

std::vector<extnat::SnatDevice> SnatDevices(const std::vector<std::string>& devices,
                                            const absl::flat_hash_set<net::IpAddress>& exclude) {
  std::map<std::string, extnat::SnatDevice> by_name;
  for (const std::string& d : devices) {
    by_name[d].device = d;
  }
  ForEachLocalAddress([&](const char* ifname, unsigned flags, const net::IpAddress& ip) {
    auto it = by_name.find(ifname);
    if (it == by_name.end() || (flags & IFF_LOOPBACK) != 0 || ip.IsLoopback() ||
        !IsNodePortAddress(ip, {}, exclude)) {
      return;
    }
    std::optional<net::IpAddress>& slot = ip.is_v4() ? it->second.v4 : it->second.v6;
    if (!slot) {
      slot = ip;
    }
  });
  std::vector<extnat::SnatDevice> out;
  out.reserve(by_name.size());
  for (auto& [name, d] : by_name) {
    out.push_back(std::move(d));
  }
  return out;
}

ExternalNat::ExternalNat(extnat::ExtNat& nat, Options options)
    : nat_(nat), options_(std::move(options)) {
  context_.node_name = options_.node_name;
  context_.random = options_.random;
}

absl::Status ExternalNat::Apply(const TableDelta& delta) {
  std::vector<extnat::Change> changes;
  if (!delta.full && !invalid_.load()) {
    for (const PortChange& change : delta.changes) {
      ExternalNatChanges(change.name, change.cur.get(), context_, changes);
    }
    return nat_.Apply(changes);
  }
  // Cleared first: a change that comes while this sync runs makes the next one full again.
  invalid_ = false;
  absl::Status status;
  if (options_.devices) {
    // A device that went away fails to attach; the services are still programmed, and the
    // error makes the next sync full, which tries again.
    std::vector<std::string> devices = options_.devices();
    if (!devices_ || *devices_ != devices) {
      if (devices.empty()) {
        LOG(WARNING) << "eBPF NAT: no external devices: remote clients go through the proxy "
                        "(--external-devices selects any device)";
      } else {
        LOG(INFO) << "eBPF NAT: external devices " << absl::StrJoin(devices, ", ");
      }
    }
    status.Update(nat_.SetDevices(devices));
    if (options_.snat_addresses) {
      status.Update(nat_.SetSnatDevices(options_.snat_addresses(devices)));
    }
    devices_ = std::move(devices);
  }
  context_.node_ips = options_.node_ips ? options_.node_ips() : std::vector<net::IpAddress>{};
  for (const auto& [name, info] : delta.table->ports()) {
    ExternalNatChanges(name, info.get(), context_, changes);
  }
  std::map<std::string, extnat::Service> all;
  for (auto& [name, service] : changes) {
    if (service) {
      all.emplace(std::move(name), std::move(*service));
    }
  }
  status.Update(nat_.ApplyAll(std::move(all)));
  return status;
}

std::map<std::string, std::vector<std::string>> ExternalNat::Frontends() const {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [name, list] : nat_.Frontends()) {
    auto& all = out[std::string(PortOf(name))];
    all.insert(all.end(), list.begin(), list.end());
  }
  return out;
}

void ExternalNat::ForEachCounter(
    absl::FunctionRef<void(std::string_view port, const extnat::ExtNat::Counts&)> fn) const {
  using Counts = extnat::ExtNat::Counts;
  SumByPort<Counts>([&](auto&& each) { nat_.ForEachCounter(each); },
                    [](Counts& sum, const Counts& c) {
                      sum.flows += c.flows;
                      sum.range_drops += c.range_drops;
                      sum.packets += c.packets;
                      sum.bytes += c.bytes;
                    },
                    fn);
}

std::map<std::string, extnat::ExtNat::Counts> ExternalNat::Counters() const {
  std::map<std::string, extnat::ExtNat::Counts> out;
  ForEachCounter([&](std::string_view port, const extnat::ExtNat::Counts& c) {
    out.emplace_hint(out.end(), port, c);
  });
  return out;
}

}  // namespace sluice::proxier
