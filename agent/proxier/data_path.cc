// SPDX-License-Identifier: Apache-2.0
#include "agent/proxier/data_path.h"

#include <ifaddrs.h>

#include <random>

#include "absl/strings/str_cat.h"

#include "agent/base/log.h"
#include "agent/base/status.h"
#include "agent/net/socket.h"

namespace sluice::proxier {

std::vector<net::IpAddress> NodeAddresses(const std::vector<net::Cidr>& cidrs,
                                          const absl::flat_hash_set<net::IpAddress>& exclude) {
  std::vector<net::IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    LOG(ERROR) << "getifaddrs: " << strerror(errno);
    return out;
  }
  static const net::Cidr kLinkLocal6 = *net::Cidr::Parse("fe80::/10");
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) {
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
    if (wanted && std::find(out.begin(), out.end(), sa->ip()) == out.end()) {
      out.push_back(sa->ip());
    }
  }
  freeifaddrs(list);
  std::sort(out.begin(), out.end());
  return out;
}

DataPath::DataPath(const Options& options, vip::VipManager& vips)
    : options_(options), vips_(vips) {}

DataPath::~DataPath() = default;  // workers stop and join; their sockets close

absl::StatusOr<std::unique_ptr<DataPath>> DataPath::Create(const Options& options,
                                                           vip::VipManager& vips,
                                                           proxy::DataPathMetrics& metrics) {
  auto dp = std::unique_ptr<DataPath>(new DataPath(options, vips));
  for (int i = 0; i < std::max(1, options.workers); ++i) {
    ASSIGN_OR_RETURN(auto worker, proxy::Worker::Create(i, options.worker, metrics));
    dp->workers_.push_back(std::move(worker));
  }
  return dp;
}

std::shared_ptr<proxy::Balancer> DataPath::BalancerFor(
    const ServicePortInfo& info, bool external,
    std::map<std::pair<ServicePortName, bool>, BalancerState>& next) {
  const auto& endpoints = external ? info.external_endpoints : info.cluster_endpoints;
  auto key = std::make_pair(info.name, external);
  auto prev = balancers_.find(key);
  if (prev != balancers_.end() && prev->second.endpoints == endpoints &&
      prev->second.affinity == info.client_ip_affinity &&
      prev->second.timeout == info.affinity_timeout) {
    next[key] = prev->second;  // unchanged: keep its rotation
    return prev->second.balancer;
  }
  // Changed: a new, reshuffled balancer. Affinity stays on -> same table, so clients stay
  // stuck unless their endpoint left; a timeout change applies at once (read per lookup).
  proxy::Balancer::Affinity affinity;
  if (info.client_ip_affinity) {
    affinity.table = prev != balancers_.end() && prev->second.affinity
                         ? prev->second.balancer->affinity().table
                         : std::make_shared<proxy::AffinityTable>();
    affinity.timeout = info.affinity_timeout;
  }
  static std::mt19937_64 seeds(std::random_device{}());
  auto balancer = std::make_shared<proxy::Balancer>(endpoints, affinity, seeds());
  next[key] = BalancerState{endpoints, info.client_ip_affinity, info.affinity_timeout, balancer};
  return balancer;
}

absl::Status DataPath::OpenListener(const proxy::ListenKey& key) {
  std::vector<base::UniqueFd> fds;
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto fd = key.transport == proxy::Transport::kTcp
                  ? net::ListenTcp(key.address, /*reuseport=*/true, options_.backlog)
                  : net::BindUdp(key.address, /*reuseport=*/true);
    if (!fd.ok()) {
      return base::Annotate(fd.status(), absl::StrCat("listen ", key.ToString()));
    }
    fds.push_back(std::move(*fd));
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i]->AddListener(key, std::move(fds[i]));
  }
  return absl::OkStatus();
}

std::shared_ptr<proxy::RouteTable> DataPath::BuildRoutes(const ServiceTable& table) {
  const std::vector<net::IpAddress> node_ips =
      NodeAddresses(options_.nodeport_cidrs, vips_.Owned());
  auto routes = std::make_shared<proxy::RouteTable>();
  std::map<std::pair<ServicePortName, bool>, BalancerState> balancers;
  auto add = [&](const ServicePortInfo& info, const net::IpAddress& ip, int port, bool external) {
    const auto& endpoints = external ? info.external_endpoints : info.cluster_endpoints;
    if (endpoints.empty()) {
      return;
    }
    proxy::ListenKey key{net::SocketAddress(ip, static_cast<uint16_t>(port)),
                         info.name.protocol == config::Protocol::kUdp ? proxy::Transport::kUdp
                                                                      : proxy::Transport::kTcp};
    auto [it, inserted] = routes->try_emplace(key);
    if (!inserted) {
      LOG(WARNING) << key.ToString() << " is claimed by " << it->second.service << " and "
                   << info.name.ToString() << "; keeping the first";
      return;
    }
    auto& active = active_[key];
    if (!active) {
      active = std::make_shared<std::atomic<int64_t>>(0);
    }
    auto& sizes = sizes_[key];
    if (!sizes) {
      sizes = std::make_shared<proxy::ConnectionSizes>();
    }
    it->second =
        proxy::Route{info.name.ToString(), BalancerFor(info, external, balancers), active, sizes};
  };
  for (const auto& [name, info] : table.ports()) {
    if (info->name.protocol == config::Protocol::kSctp) {
      continue;  // the userspace proxy serves TCP and UDP
    }
    for (const auto& ip : info->cluster_ips) {
      add(*info, ip, info->port, false);
    }
    for (const auto& ip : info->external_ips) {
      add(*info, ip, info->port, true);
    }
    if (info->node_port > 0) {
      for (const auto& ip : node_ips) {
        add(*info, ip, info->node_port, true);
      }
    }
  }
  balancers_ = std::move(balancers);
  return routes;
}

absl::flat_hash_set<net::IpAddress> DataPath::WantedVips(const ServiceTable& table,
                                                         const proxy::RouteTable& routes) {
  absl::flat_hash_set<net::IpAddress> vips;
  for (const auto& [name, info] : table.ports()) {
    vips.insert(info->cluster_ips.begin(), info->cluster_ips.end());
    vips.insert(info->external_ips.begin(), info->external_ips.end());
  }
  // A removed listener with open connections keeps its VIP until they close (checked again on
  // every sync, at least every --sync-period): removing the address would strand them.
  for (auto it = active_.begin(); it != active_.end();) {
    if (routes.contains(it->first)) {
      ++it;
    } else if (it->second->load(std::memory_order_relaxed) > 0) {
      vips.insert(it->first.address.ip());
      ++it;
    } else {
      sizes_.erase(it->first);
      it = active_.erase(it);
    }
  }
  return vips;
}

absl::Status DataPath::Apply(const std::shared_ptr<const ServiceTable>& table) {
  absl::Status result;
  // VIPs before listeners, and every service address even without endpoints: the kernel
  // refuses connections to a local address without a listener, but not to a foreign one.
  auto routes = BuildRoutes(*table);
  result.Update(vips_.Reconcile(WantedVips(*table, *routes)));

  // Routes before listeners: a new listener must find its route when its first client comes.
  for (auto& w : workers_) {
    w->SetRoutes(routes);
  }
  std::map<proxy::ListenKey, std::string> open;
  for (const auto& [key, route] : *routes) {
    if (open_.contains(key)) {
      open[key] = route.service;
    } else if (absl::Status st = OpenListener(key); st.ok()) {
      open[key] = route.service;
    } else {
      result.Update(st);
    }
  }
  for (const auto& [key, service] : open_) {
    if (!open.contains(key)) {
      for (auto& w : workers_) {
        w->RemoveListener(key);
      }
    }
  }
  open_ = std::move(open);

  std::map<std::string, std::vector<std::string>> view;
  for (const auto& [key, service] : open_) {
    view[service].push_back(key.ToString());
  }
  absl::MutexLock lock(&mu_);
  listeners_view_ = std::move(view);
  return result;
}

std::vector<proxy::ConnectionInfo> DataPath::Connections() const {
  std::vector<proxy::ConnectionInfo> all;
  for (const auto& w : workers_) {  // workers_ is fixed after Create
    auto infos = w->Connections(absl::Seconds(1));
    all.insert(all.end(), std::make_move_iterator(infos.begin()),
               std::make_move_iterator(infos.end()));
  }
  return all;
}

std::map<std::string, std::vector<std::string>> DataPath::Listeners() const {
  absl::MutexLock lock(&mu_);
  return listeners_view_;
}

}  // namespace sluice::proxier
