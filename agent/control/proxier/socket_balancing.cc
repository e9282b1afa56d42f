// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/socket_balancing.h"

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

#include "agent/control/proxier/backend_order.h"
#include "agent/control/proxier/port_counters.h"

namespace sluice::proxier {
namespace {

// The socket-LB service name "<port>#<c|e><4|6>": counters sum back by the part before '#'.
std::string Name(const ServicePortName& port, bool external, bool v4) {
  return absl::StrCat(port.ToString(), "#", external ? "e" : "c", v4 ? "4" : "6");
}

}  // namespace

SocketBalancing::SocketBalancing(socklb::SocketLb& lb, Options options)
    : lb_(lb), options_(std::move(options)) {}

void SocketBalancing::Build(const ServicePortName& port, const ServicePortInfo* info,
                            std::vector<socklb::Change>& out) const {
  const bool udp = port.protocol == config::Protocol::kUdp;
  // SCTP is not served (the proxy does not serve it either): its names are all removed.
  const bool served = info != nullptr && (udp || port.protocol == config::Protocol::kTcp);
  std::vector<net::SocketAddress> cluster, external;
  if (served) {
    for (const auto& ip : info->cluster_ips) {
      cluster.emplace_back(ip, info->port);
    }
    for (const auto& ip : info->external_ips) {
      // A hook cannot know a connect()'s source address before the kernel picks it: a
      // LoadBalancer IP behind source ranges is left to the proxy, which sees the source.
      if (SourceRangesFor(*info, ip).empty()) {
        external.emplace_back(ip, info->port);
      }
    }
    for (const auto& ip : info->node_port > 0 ? node_ips_ : std::vector<net::IpAddress>{}) {
      external.emplace_back(ip, info->node_port);
    }
  }
  // One side and family: its frontends with the endpoints of that family, or nothing where it
  // has none, or where the side has endpoints but none of this family (the proxy serves it).
  auto side = [&](const std::string& name, const std::vector<net::SocketAddress>& frontends,
                  const std::vector<net::SocketAddress>& endpoints,
                  bool v4) -> std::optional<socklb::Service> {
    socklb::Service svc;
    for (const auto& f : frontends) {
      if (f.ip().is_v4() == v4) {
        svc.frontends.push_back({f, udp});
      }
    }
    for (const auto& e : endpoints) {
      if (e.ip().is_v4() == v4) {
        svc.backends.push_back(e);
      }
    }
    if (svc.frontends.empty() || (svc.backends.empty() && !endpoints.empty())) {
      return std::nullopt;
    }
    NodeOrder(name, options_.node_name, svc.backends);
    if (info->client_ip_affinity) {
      svc.affinity = info->affinity_timeout;
    }
    svc.random = options_.random;
    return svc;
  };
  for (bool is_external : {false, true}) {
    for (bool v4 : {true, false}) {
      std::string name = Name(port, is_external, v4);
      std::optional<socklb::Service> svc;
      if (served) {
        // Every client of these hooks is on this node, and kube-proxy sends node-local traffic
        // for an external address of an externalTrafficPolicy: Local service where the
        // ClusterIP's goes (its "short-circuit"), so it works without an endpoint here.
        const bool short_circuit = info->external_policy == config::TrafficPolicy::kLocal;
        svc = is_external
                  ? side(name, external,
                         short_circuit ? info->cluster_endpoints : info->external_endpoints, v4)
                  : side(name, cluster, info->cluster_endpoints, v4);
      }
      out.emplace_back(std::move(name), std::move(svc));
    }
  }
}

absl::Status SocketBalancing::Apply(const TableDelta& delta) {
  std::vector<socklb::Change> changes;
  if (!delta.full) {
    // One map update per changed port, against what SocketLb programmed.
    for (const PortChange& change : delta.changes) {
      Build(change.name, change.cur.get(), changes);
    }
    return lb_.Apply(changes);
  }
  // A full sync re-reads the node's addresses and rewrites what differs.
  node_ips_ = options_.node_ips ? options_.node_ips() : std::vector<net::IpAddress>{};
  for (const auto& [name, info] : delta.table->ports()) {
    Build(name, info.get(), changes);
  }
  std::map<std::string, socklb::Service> all;
  for (auto& [name, service] : changes) {
    if (service) {
      all.emplace(std::move(name), std::move(*service));
    }
  }
  return lb_.ApplyAll(all);
}

std::map<std::string, std::vector<std::string>> SocketBalancing::Frontends() const {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [name, list] : lb_.Frontends()) {
    auto& all = out[std::string(PortOf(name))];
    all.insert(all.end(), list.begin(), list.end());
  }
  return out;
}

void SocketBalancing::ForEachCounter(
    absl::FunctionRef<void(std::string_view port, const socklb::SocketLb::Counts&)> fn) const {
  using Counts = socklb::SocketLb::Counts;
  SumByPort<Counts>(
      [&](auto&& each) {
        lb_.ForEachCounter(
            [&](const std::string& name, uint32_t, const Counts& c) { each(name, c); });
      },
      [](Counts& sum, const Counts& c) {
        sum.translated += c.translated;
        sum.refused += c.refused;
      },
      fn);
}

std::map<std::string, socklb::SocketLb::Counts> SocketBalancing::Counters() const {
  std::map<std::string, socklb::SocketLb::Counts> out;
  ForEachCounter([&](std::string_view port, const socklb::SocketLb::Counts& c) {
    out.emplace_hint(out.end(), port, c);
  });
  return out;
}

}  // namespace sluice::proxier
