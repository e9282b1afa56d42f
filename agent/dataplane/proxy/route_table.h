// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <compare>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/base/cow_map.h"
#include "lib/base/metrics.h"
#include "lib/net/address.h"

#include "agent/dataplane/proxy/load_balancer.h"

namespace sluice::proxy {

enum class Transport { kTcp, kUdp };

// One listening address of the proxy.
struct ListenKey {
  net::SocketAddress address;
  Transport transport = Transport::kTcp;
  std::string ToString() const;
  friend bool operator==(const ListenKey&, const ListenKey&) = default;
  friend auto operator<=>(const ListenKey&, const ListenKey&) = default;
};

// The sources a LoadBalancer IP admits (its service's loadBalancerSourceRanges). Immutable;
// shared by the workers. Thread-safe.
class SourceFilter final {
 public:
  // `refused` counts what Admit turns away; it must outlive the filter.
  SourceFilter(std::vector<net::Cidr> allowed, base::Counter& refused)
      : allowed_(std::move(allowed)), refused_(refused) {}
  bool Contains(const net::IpAddress& source) const;
  // Contains, counting a refusal.
  bool Admit(const net::IpAddress& source) const;
  const std::vector<net::Cidr>& allowed() const { return allowed_; }

 private:
  const std::vector<net::Cidr> allowed_;
  base::Counter& refused_;
};

// Where connections to one listening address go. A listener exists only while its route has
// endpoints: with none, the kernel itself refuses (TCP RST, ICMP port unreachable).
struct Route {
  std::string service;  // "namespace/name:port" for logs and /debug
  std::shared_ptr<Balancer> balancer;
  // TCP connections accepted on this listener and still open, across workers. The control
  // plane keeps a removed service's VIP while this is non-zero, so its established connections
  // can run to completion.
  std::shared_ptr<std::atomic<int64_t>> active = std::make_shared<std::atomic<int64_t>>(0);
  // Null: every source is served. Otherwise TCP clients outside it are reset at accept and
  // their UDP datagrams dropped, before any endpoint is picked.
  std::shared_ptr<const SourceFilter> sources;
};

// The data path's view of the service table: immutable, posted to every worker after a sync.
// Each sync's table is a copy of the last one that shares its unchanged chunks.
using RouteTable = base::CowMap<ListenKey, Route>;
using RouteTablePtr = std::shared_ptr<const RouteTable>;

}  // namespace sluice::proxy
