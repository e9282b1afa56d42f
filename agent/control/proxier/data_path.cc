// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/data_path.h"

#include <ifaddrs.h>

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/socket.h"

#include "agent/dataplane/fastpath/reuseport_balancer.h"

namespace sluice::proxier {
namespace {

// How long a sync waits for a worker's loop before going on without it (a loop turns in
// microseconds; one stalled this long is logged).
constexpr absl::Duration kWorkerWait = absl::Seconds(5);

}  // namespace

bool IsNodePortAddress(const net::IpAddress& ip, const std::vector<net::Cidr>& cidrs,
                       const absl::flat_hash_set<net::IpAddress>& exclude) {
  static const net::Cidr kLinkLocal6 = *net::Cidr::Parse("fe80::/10");
  return !kLinkLocal6.Contains(ip) && !exclude.contains(ip) &&
         (cidrs.empty() || std::any_of(cidrs.begin(), cidrs.end(),
                                       [&](const net::Cidr& c) { return c.Contains(ip); }));
}

void ForEachLocalAddress(
    absl::FunctionRef<void(const char* ifname, unsigned flags, const net::IpAddress& ip)> fn) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    LOG(ERROR) << "getifaddrs: " << strerror(errno);
    return;
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr ||
        (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) {
      continue;
    }
    const socklen_t len =
        a->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (auto sa = net::SocketAddress::FromSockaddr(a->ifa_addr, len)) {
      fn(a->ifa_name, a->ifa_flags, sa->ip());
    }
  }
  freeifaddrs(list);
}

std::vector<net::IpAddress> NodeAddresses(const std::vector<net::Cidr>& cidrs,
                                          const absl::flat_hash_set<net::IpAddress>& exclude) {
  std::vector<net::IpAddress> out;
  ForEachLocalAddress([&](const char*, unsigned, const net::IpAddress& ip) {
    if (IsNodePortAddress(ip, cidrs, exclude) &&
        std::find(out.begin(), out.end(), ip) == out.end()) {
      out.push_back(ip);
    }
  });
  std::sort(out.begin(), out.end());
  return out;
}

DataPath::DataPath(const Options& options, vip::VipManager& vips, proxy::DataPathMetrics& metrics)
    : options_(options),
      vips_(vips),
      metrics_(metrics),
      fds_(proxy::FdBudget::ForProcess(options.fd_reserve)) {}

DataPath::~DataPath() = default;  // workers stop and join; their sockets close

absl::StatusOr<std::unique_ptr<DataPath>> DataPath::Create(const Options& options,
                                                           vip::VipManager& vips,
                                                           proxy::DataPathMetrics& metrics) {
  auto dp = std::unique_ptr<DataPath>(new DataPath(options, vips, metrics));
  proxy::Worker::Options worker_options = options.worker;
  worker_options.fds = &dp->fds_;
  for (int i = 0; i < std::max(1, options.workers); ++i) {
    ASSIGN_OR_RETURN(auto worker, proxy::Worker::Create(i, worker_options, metrics));
    dp->workers_.push_back(std::move(worker));
  }
  return dp;
}

std::shared_ptr<proxy::Balancer> DataPath::BalancerFor(const ServicePortInfo& info, bool external,
                                                       BalancerMap& next) {
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

const std::vector<net::IpAddress>& DataPath::NodeIps() {
  // getifaddrs walks every local address, our ~10k VIPs included, so it runs only when a port
  // has a NodePort, once per full sync.
  if (!node_ips_) {
    node_ips_ = NodeAddresses(options_.nodeport_cidrs, vips_.Owned());
  }
  return *node_ips_;
}

const std::vector<net::IpAddress>& DataPath::OwnIps() {
  if (!own_ips_) {
    own_ips_ = NodeAddresses({}, vips_.Owned());
    std::erase_if(*own_ips_, [](const net::IpAddress& ip) { return ip.IsLoopback(); });
  }
  return *own_ips_;
}

std::shared_ptr<const proxy::SourceFilter> DataPath::FiltersFor(const ServicePortInfo& info,
                                                                const net::IpAddress& ip,
                                                                int port) {
  std::vector<net::Cidr> allowed =
      port == info.port ? SourceRangesFor(info, ip) : std::vector<net::Cidr>{};  // a NodePort
  if (allowed.empty()) {
    return nullptr;
  }
  // A client on the node reaches the local LoadBalancer IP from that same address (the kernel's
  // source for a local destination), which kube-proxy admits when a range holds the node's IP.
  bool node_allowed = false;
  for (const net::Cidr& cidr : allowed) {
    for (const auto& own : OwnIps()) {
      node_allowed = node_allowed || cidr.Contains(own);
    }
  }
  if (node_allowed) {
    allowed.push_back(*net::Cidr::Make(ip, ip.is_v4() ? 32 : 128));
  }
  return std::make_shared<proxy::SourceFilter>(
      std::move(allowed), metrics_.source_range_refused.WithLabels({info.name.ToString()}));
}

void DataPath::NoteUnserved(const ServicePortInfo& info) {
  // Every sluice path carries TCP and UDP only (and this machine's kernel has no SCTP at all).
  if (info.name.protocol != config::Protocol::kSctp) {
    return;
  }
  absl::MutexLock lock(&mu_);
  if (sctp_.insert(info.name).second) {
    LOG(WARNING) << "service port " << info.name.ToString() << " is not served: " << kSctpUnserved;
  }
  metrics_.unserved_ports.WithLabels({"sctp"}).Set(static_cast<double>(sctp_.size()));
}

void DataPath::ForgetUnserved(const ServiceTable& table) {
  absl::MutexLock lock(&mu_);
  std::erase_if(sctp_, [&](const ServicePortName& name) { return table.Find(name) == nullptr; });
  metrics_.unserved_ports.WithLabels({"sctp"}).Set(static_cast<double>(sctp_.size()));
}

template <typename Fn>
void DataPath::ForEachListener(const ServicePortInfo& info, Fn&& fn) {
  if (info.name.protocol == config::Protocol::kSctp) {
    return;  // the userspace proxy serves TCP and UDP
  }
  for (const auto& ip : info.cluster_ips) {
    fn(ip, info.port, false);
  }
  for (const auto& ip : info.external_ips) {
    fn(ip, info.port, true);
  }
  if (info.node_port > 0) {
    for (const auto& ip : NodeIps()) {
      fn(ip, info.node_port, true);
    }
  }
}

size_t DataPath::ListenerCount(const ServicePortInfo& info) {
  size_t n = 0;
  ForEachListener(info, [&](const net::IpAddress&, int, bool external) {
    n += (external ? info.external_endpoints : info.cluster_endpoints).empty() ? 0 : 1;
  });
  return n;
}

proxy::ListenKey DataPath::KeyFor(const ServicePortInfo& info, const net::IpAddress& ip, int port) {
  return proxy::ListenKey{net::SocketAddress(ip, static_cast<uint16_t>(port)),
                          info.name.protocol == config::Protocol::kUdp ? proxy::Transport::kUdp
                                                                       : proxy::Transport::kTcp};
}

std::vector<proxy::ListenKey> DataPath::RoutedKeys(const ServicePortInfo& info) {
  std::vector<proxy::ListenKey> keys;
  ForEachListener(info, [&](const net::IpAddress& ip, int port, bool external) {
    if (!(external ? info.external_endpoints : info.cluster_endpoints).empty()) {
      keys.push_back(KeyFor(info, ip, port));
    }
  });
  return keys;
}

bool DataPath::AddRoute(proxy::RouteTable& routes, const ServicePortInfo& info,
                        const net::IpAddress& ip, int port, bool external, BalancerMap& next) {
  const auto& endpoints = external ? info.external_endpoints : info.cluster_endpoints;
  if (endpoints.empty()) {
    return true;
  }
  proxy::ListenKey key = KeyFor(info, ip, port);
  if (routes.contains(key)) {
    return false;
  }
  auto& active = active_[key];
  if (!active) {
    active = std::make_shared<std::atomic<int64_t>>(0);
  }
  routes.insert_or_assign(key, proxy::Route{info.name.ToString(), BalancerFor(info, external, next),
                                            active, FiltersFor(info, ip, port)});
  return true;
}

std::shared_ptr<const proxy::RouteTable> DataPath::BuildRoutes(const ServiceTable& table) {
  auto routes = std::make_shared<proxy::RouteTable>();
  BalancerMap balancers;
  conflicts_ = false;
  Admitted(AdmitServices(table, options_.caps, admitted_,
                         [this](const ServicePortInfo& info) { return ListenerCount(info); }));
  for (const auto& entry : table.ports()) {
    const ServicePortInfo& info = *entry.second;
    NoteUnserved(info);
    if (!admitted_.contains(info.name.service)) {
      continue;
    }
    ForEachListener(info, [&](const net::IpAddress& ip, int port, bool external) {
      if (!AddRoute(*routes, info, ip, port, external, balancers)) {
        conflicts_ = true;
        LOG(WARNING) << KeyFor(info, ip, port).ToString() << " is claimed by "
                     << routes->find(KeyFor(info, ip, port))->second.service << " and "
                     << info.name.ToString() << "; keeping the first";
      }
    });
  }
  balancers_ = std::move(balancers);
  ForgetUnserved(table);
  return routes;
}

std::shared_ptr<const proxy::RouteTable> DataPath::PatchRoutes(
    const ServiceTable& prev, const ServiceTable& next, std::span<const PortChange> changes,
    std::vector<proxy::ListenKey>& keys) {
  if (conflicts_) {
    return nullptr;  // which claim wins depends on the whole table
  }
  std::vector<const ServicePortInfo*> gone;
  std::vector<const ServicePortInfo*> added;
  // Of those, the ports whose listeners change: only they can move admission.
  std::vector<const ServicePortInfo*> resized_gone;
  std::vector<const ServicePortInfo*> resized_added;
  for (const PortChange& change : changes) {
    // An endpoint change keeps a port's routed listeners, and admission counts listeners
    // only: a skipped service stays skipped (no routes to patch), an admitted one admitted.
    const bool same =
        change.prev && change.cur && RoutedKeys(*change.prev) == RoutedKeys(*change.cur);
    if (same && !admitted_.contains(change.cur->name.service)) {
      continue;
    }
    if (change.prev) {
      gone.push_back(change.prev.get());
      if (!same) {
        resized_gone.push_back(change.prev.get());
      }
    }
    if (change.cur) {
      added.push_back(change.cur.get());
      if (!same) {
        resized_added.push_back(change.cur.get());
      }
    }
  }
  if (gone.empty() && added.empty()) {
    return routes_;
  }
  if (CapsInvolved(resized_gone, prev) || CapsInvolved(resized_added, next)) {
    return nullptr;  // admission weighs the whole table
  }
  // The copy shares routes_' chunks (workers keep reading those); a change copies its chunk.
  auto routes = std::make_shared<proxy::RouteTable>(*routes_);
  for (const ServicePortInfo* info : gone) {
    const std::string service = info->name.ToString();
    ForEachListener(*info, [&](const net::IpAddress& ip, int port, bool) {
      const proxy::ListenKey key = KeyFor(*info, ip, port);
      if (auto it = routes->find(key); it != routes->end() && it->second.service == service) {
        routes->erase(key);
      }
      keys.push_back(key);
    });
  }
  BalancerMap balancers;  // of the added ports; BalancerFor reads their previous state
  for (const ServicePortInfo* info : added) {
    bool conflict = false;
    ForEachListener(*info, [&](const net::IpAddress& ip, int port, bool external) {
      conflict = !AddRoute(*routes, *info, ip, port, external, balancers) || conflict;
      keys.push_back(KeyFor(*info, ip, port));
    });
    if (conflict) {
      return nullptr;
    }
  }
  if (routes->size() > options_.caps.max_listeners) {
    return nullptr;
  }
  for (const ServicePortInfo* info : gone) {
    admitted_.erase(info->name.service);
  }
  for (const ServicePortInfo* info : added) {
    admitted_.insert(info->name.service);
  }
  for (const ServicePortInfo* info : gone) {
    balancers_.erase({info->name, false});
    balancers_.erase({info->name, true});
  }
  for (const ServicePortInfo* info : added) {
    NoteUnserved(*info);
  }
  if (!gone.empty()) {
    ForgetUnserved(next);
  }
  balancers_.merge(balancers);
  return routes;
}

template <typename Fn>
void DataPath::ForEachVip(const ServicePortInfo& info, Fn&& fn) {
  for (const auto& ip : info.cluster_ips) {
    fn(ip);
  }
  for (const auto& ip : info.external_ips) {
    fn(ip);
  }
}

absl::Status DataPath::ReconcileVips(const ServiceTable& table, const proxy::RouteTable& routes) {
  vip_refs_.clear();
  for (const auto& [name, info] : table.ports()) {
    ForEachVip(*info, [&](const net::IpAddress& ip) { ++vip_refs_[ip]; });
  }
  absl::flat_hash_set<net::IpAddress> vips;
  vips.reserve(vip_refs_.size());
  for (const auto& [ip, refs] : vip_refs_) {
    vips.insert(ip);
  }
  // A removed listener with open connections keeps its VIP until they close (checked again on
  // every sync): removing the address would strand them.
  draining_.clear();
  auto route = routes.begin();  // both maps are sorted by key: a merge walk, no lookups
  for (auto it = active_.begin(); it != active_.end();) {
    while (route != routes.end() && route->first < it->first) {
      ++route;
    }
    if (route != routes.end() && route->first == it->first) {
      ++it;
    } else if (it->second->load(std::memory_order_relaxed) > 0) {
      vips.insert(it->first.address.ip());
      draining_.insert(it->first);
      ++it;
    } else {
      it = active_.erase(it);
    }
  }
  return vips_.Reconcile(vips);
}

absl::Status DataPath::UpdateVips(std::span<const PortChange> changes,
                                  const proxy::RouteTable& routes,
                                  const std::vector<proxy::ListenKey>& keys) {
  std::vector<net::IpAddress> add, unused;
  for (const PortChange& change : changes) {
    if (change.prev) {
      ForEachVip(*change.prev, [&](const net::IpAddress& ip) {
        if (auto it = vip_refs_.find(ip); it != vip_refs_.end() && --it->second == 0) {
          vip_refs_.erase(it);
          unused.push_back(ip);
        }
      });
    }
    if (change.cur) {
      ForEachVip(*change.cur, [&](const net::IpAddress& ip) {
        if (vip_refs_[ip]++ == 0) {
          add.push_back(ip);
        }
      });
    }
  }
  // Listeners this delta removed start draining while they carry connections; drained ones let
  // their VIP go (as ReconcileVips, but over the few draining listeners, not all of them).
  for (const proxy::ListenKey& key : keys) {
    auto it = active_.find(key);
    if (it != active_.end() && !routes.contains(key)) {
      draining_.insert(key);
    }
  }
  absl::flat_hash_set<net::IpAddress> held;
  for (auto key = draining_.begin(); key != draining_.end();) {
    auto it = active_.find(*key);
    if (routes.contains(*key)) {
      key = draining_.erase(key);  // served again
    } else if (it != active_.end() && it->second->load(std::memory_order_relaxed) > 0) {
      held.insert(key->address.ip());
      ++key;
    } else {
      unused.push_back(key->address.ip());
      if (it != active_.end()) {
        active_.erase(it);
      }
      key = draining_.erase(key);
    }
  }
  std::vector<net::IpAddress> remove;
  for (const net::IpAddress& ip : unused) {
    if (!vip_refs_.contains(ip) && !held.contains(ip)) {
      remove.push_back(ip);
    }
  }
  // An address one port released and another (or the same) took is no change.
  const absl::flat_hash_set<net::IpAddress> had(unused.begin(), unused.end());
  std::erase_if(
      add, [&](const net::IpAddress& ip) { return !vip_refs_.contains(ip) || had.contains(ip); });
  for (auto* list : {&add, &remove}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  if (add.empty() && remove.empty()) {
    return absl::OkStatus();
  }
  return vips_.Update(add, remove);
}

absl::Status DataPath::Apply(const TableDelta& delta) {
  // A full sync rebuilds every route and re-reads the kernel's addresses, which repairs drift
  // (a VIP removed by hand, a new node address for NodePorts); any other costs what changed.
  const std::shared_ptr<const ServiceTable>& table = delta.table;
  const bool full = delta.full || applied_ == nullptr;
  if (full) {
    vips_.MarkStale();
    node_ips_.reset();
    own_ips_.reset();
  }
  std::vector<proxy::ListenKey> keys;  // the listen addresses of the changed ports
  std::shared_ptr<const proxy::RouteTable> routes =
      full ? nullptr : PatchRoutes(*applied_, *table, delta.changes, keys);
  const bool patched = routes != nullptr;
  if (!patched) {
    routes = BuildRoutes(*table);
  }
  applied_ = table;
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

  // VIPs before listeners, and every service address even without endpoints: the kernel
  // refuses connections to a local address without a listener, but not to a foreign one.
  absl::Status result =
      patched ? UpdateVips(delta.changes, *routes, keys) : ReconcileVips(*table, *routes);

  // Routes before listeners: a new listener must find its route when its first client comes.
  bool posted = routes != routes_;
  if (posted) {
    for (auto& w : workers_) {
      w->SetRoutes(routes);
    }
  }
  std::vector<proxy::ListenKey> closed;
  // A listener that fails is reported and retried at every sync, not fatal.
  posted = SyncListeners(*routes, patched ? &keys : nullptr, closed) || posted;
  routes_ = std::move(routes);
  // Routes and listener removals reach the workers as posted tasks. Waiting for them makes the
  // sync's promise exact: once it returns (and /debug/services shows the table) every worker
  // uses the new routes, and a port moved away refuses instead of reaching its old socket.
  for (auto& w : workers_) {
    if (posted && !w->Flush(kWorkerWait)) {
      LOG(WARNING) << "sync: a worker took more than " << kWorkerWait << " to take it";
    }
  }
  absl::MutexLock lock(&mu_);
  for (const proxy::ListenKey& key : closed) {
    open_.erase(key);
  }
  return result;  // an error makes the next sync full: a failed VIP is retried from scratch
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

}  // namespace sluice::proxier
