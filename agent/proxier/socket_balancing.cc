// SPDX-License-Identifier: Apache-2.0
#include "agent/proxier/socket_balancing.h"

#include <algorithm>
#include <random>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

#include "agent/base/log.h"

namespace sluice::proxier {
namespace {

// The socket-LB service name "<port>#<c|e><4|6>": counters sum back by the part before '#'.
std::string Name(const ServicePortName& port, bool external, bool v4) {
  return absl::StrCat(port.ToString(), "#", external ? "e" : "c", v4 ? "4" : "6");
}

std::string PortOf(const std::string& name) { return name.substr(0, name.rfind('#')); }

}  // namespace

SocketBalancing::SocketBalancing(socklb::SocketLb& lb, Options options)
    : lb_(lb), options_(std::move(options)) {}

std::map<std::string, socklb::Service> SocketBalancing::Build(const ServicePortInfo& info) const {
  std::map<std::string, socklb::Service> out;
  const bool udp = info.name.protocol == config::Protocol::kUdp;
  if (!udp && info.name.protocol != config::Protocol::kTcp) {
    return out;  // SCTP: the proxy does not serve it either
  }
  auto side = [&](bool external, const std::vector<net::SocketAddress>& endpoints,
                  const std::vector<net::SocketAddress>& frontends) {
    for (bool v4 : {true, false}) {
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
        continue;
      }
      // Round-robin starts at a different backend on each node, but the order stays the same
      // from one sync to the next, so an unchanged service is not rewritten.
      const std::string name = Name(info.name, external, v4);
      std::mt19937_64 rng(absl::HashOf(name, options_.node_name));
      std::shuffle(svc.backends.begin(), svc.backends.end(), rng);
      if (info.client_ip_affinity) {
        svc.affinity = info.affinity_timeout;
      }
      svc.random = options_.random;
      out.emplace(name, std::move(svc));
    }
  };
  std::vector<net::SocketAddress> cluster, external;
  for (const auto& ip : info.cluster_ips) {
    cluster.emplace_back(ip, info.port);
  }
  for (const auto& ip : info.external_ips) {
    external.emplace_back(ip, info.port);
  }
  if (info.node_port > 0) {
    for (const auto& ip : node_ips_) {
      external.emplace_back(ip, info.node_port);
    }
  }
  side(false, info.cluster_endpoints, cluster);
  side(true, info.external_endpoints, external);
  return out;
}

void SocketBalancing::Diff(const std::map<std::string, socklb::Service>& had,
                           const std::map<std::string, socklb::Service>& want,
                           std::vector<socklb::Change>* out,
                           std::vector<socklb::SocketLb::Gone>* gone) const {
  for (const auto& [name, svc] : had) {
    auto it = want.find(name);
    if (it == want.end()) {
      out->emplace_back(name, std::nullopt);
    }
    const socklb::Service* next = it == want.end() ? nullptr : &it->second;
    // Connected UDP sockets aimed at a backend that left must be closed (they never connect
    // again by themselves); TCP connections are left to finish, as on the proxy path.
    for (const auto& f : svc.frontends) {
      if (!f.udp) {
        continue;
      }
      for (const auto& b : svc.backends) {
        if (next == nullptr ||
            std::find(next->backends.begin(), next->backends.end(), b) == next->backends.end()) {
          gone->push_back({f.address, b});
        }
      }
    }
  }
  for (const auto& [name, svc] : want) {
    auto it = had.find(name);
    if (it == had.end() || !(it->second == svc)) {
      out->emplace_back(name, svc);
    }
  }
}

absl::Status SocketBalancing::Apply(const std::shared_ptr<const ServiceTable>& table) {
  // As DataPath: the first sync, the periodic resync (the same table again) and the one after
  // an error rebuild every port and re-read the node's addresses; others redo changed ports.
  const bool full = std::exchange(full_next_, false) || table == applied_ || applied_ == nullptr;
  if (full) {
    node_ips_ = options_.node_ips ? options_.node_ips() : std::vector<net::IpAddress>{};
  }
  std::vector<socklb::Change> changes;
  std::vector<socklb::SocketLb::Gone> gone;
  auto redo = [&](const ServicePortName& name, const ServicePortInfo* info) {
    static const std::map<std::string, socklb::Service> kNone;
    auto had = programmed_.find(name);
    auto want = info != nullptr ? Build(*info) : kNone;
    Diff(had == programmed_.end() ? kNone : had->second, want, &changes, &gone);
    if (info == nullptr) {
      programmed_.erase(name);
    } else {
      programmed_[name] = std::move(want);
    }
  };
  const auto& next = table->ports();
  if (full) {
    for (const auto& [name, info] : next) {
      redo(name, info.get());
    }
    for (auto it = programmed_.begin(); it != programmed_.end();) {
      const ServicePortName name = (it++)->first;  // a copy: redo erases the entry
      if (!next.contains(name)) {
        redo(name, nullptr);
      }
    }
  } else {
    // Both tables are sorted by name, and the Proxier rebuilds only changed ports: walk them
    // together, and an unchanged port costs one pointer comparison, not a key lookup.
    const auto& prev = applied_->ports();
    auto a = prev.begin();
    auto b = next.begin();
    while (a != prev.end() || b != next.end()) {
      if (a != prev.end() && b != next.end() && a->second == b->second) {
        ++a, ++b;
      } else if (b == next.end() || (a != prev.end() && a->first < b->first)) {
        redo((a++)->first, nullptr);  // removed
      } else if (a == prev.end() || b->first < a->first) {
        redo(b->first, b->second.get());  // added
        ++b;
      } else {
        redo(b->first, b->second.get());  // changed
        ++a, ++b;
      }
    }
  }
  // As DataPath: the first sync's node addresses may include an earlier run's VIPs, which the
  // VIP manager adopts or removes in that sync; the second one reads them again.
  full_next_ = applied_ == nullptr;
  applied_ = table;
  absl::Status result = lb_.Apply(changes);
  if (result.ok() && !swept_) {
    swept_ = true;  // what an earlier agent left and this table no longer has
    result = lb_.Sweep();
  }
  if (!gone.empty()) {
    auto walked = lb_.Reap(gone);
    if (!walked.ok()) {
      LOG(WARNING) << "socket LB: closing UDP sockets of removed backends: " << walked.status();
    }
  }
  if (!result.ok()) {
    full_next_ = true;
  }
  return result;
}

std::map<std::string, std::vector<std::string>> SocketBalancing::Frontends() const {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [name, list] : lb_.Frontends()) {
    auto& all = out[PortOf(name)];
    all.insert(all.end(), list.begin(), list.end());
  }
  return out;
}

std::map<std::string, socklb::SocketLb::Counts> SocketBalancing::Counters() const {
  std::map<std::string, socklb::SocketLb::Counts> out;
  for (const auto& [name, c] : lb_.Counters()) {
    auto& sum = out[PortOf(name)];
    sum.translated += c.translated;
    sum.refused += c.refused;
  }
  return out;
}

}  // namespace sluice::proxier
