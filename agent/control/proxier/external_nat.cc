// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/external_nat.h"

#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>

#include <algorithm>

#include "lib/base/log.h"

namespace sluice::proxier {
namespace {

// The part of an extnat service name (external_nat_changes.cc) before '#'.
std::string PortOf(const std::string& name) { return name.substr(0, name.rfind('#')); }

}  // namespace

std::vector<std::string> NodeDevices(const std::vector<net::Cidr>& cidrs,
                                     const absl::flat_hash_set<net::IpAddress>& exclude) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    LOG(ERROR) << "getifaddrs: " << strerror(errno);
    return out;
  }
  static const net::Cidr kLinkLocal6 = *net::Cidr::Parse("fe80::/10");
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    const socklen_t len =
        a->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    auto sa = net::SocketAddress::FromSockaddr(a->ifa_addr, len);
    if (!sa || kLinkLocal6.Contains(sa->ip()) || exclude.contains(sa->ip())) {
      continue;
    }
    bool wanted = cidrs.empty();
    for (const auto& c : cidrs) {
      wanted = wanted || c.Contains(sa->ip());
    }
    if (wanted && std::find(out.begin(), out.end(), a->ifa_name) == out.end()) {
      out.emplace_back(a->ifa_name);
    }
  }
  freeifaddrs(list);
  std::sort(out.begin(), out.end());
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
    status.Update(nat_.SetDevices(options_.devices()));
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
  status.Update(nat_.ApplyAll(all));
  return status;
}

std::map<std::string, std::vector<std::string>> ExternalNat::Frontends() const {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [name, list] : nat_.Frontends()) {
    auto& all = out[PortOf(name)];
    all.insert(all.end(), list.begin(), list.end());
  }
  return out;
}

std::map<std::string, extnat::ExtNat::Counts> ExternalNat::Counters() const {
  std::map<std::string, extnat::ExtNat::Counts> out;
  for (const auto& [name, c] : nat_.Counters()) {
    auto& sum = out[PortOf(name)];
    sum.flows += c.flows;
    sum.range_drops += c.range_drops;
    sum.packets += c.packets;
    sum.bytes += c.bytes;
  }
  return out;
}

}  // namespace sluice::proxier
