// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <compare>
#include <map>
#include <memory>
#include <string>

#include "agent/net/address.h"
#include "agent/proxy/load_balancer.h"

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

// The typical size of a listener's TCP connections: an exponentially weighted mean of the bytes
// (both directions) of its closed connections, 1/8 weight each. It decides whether a new
// connection starts on the sockmap fast path (see SockmapPromotion). Unknown (no connection
// closed yet) reads as UINT64_MAX: a new service starts there. Thread-safe.
class ConnectionSizes final {
 public:
  void Add(uint64_t bytes) {
    uint64_t old = mean_.load(std::memory_order_relaxed);
    uint64_t next;
    do {
      next = old == kUnknown ? bytes : old - old / 8 + bytes / 8;
    } while (!mean_.compare_exchange_weak(old, next, std::memory_order_relaxed));
  }
  uint64_t mean() const { return mean_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint64_t kUnknown = ~uint64_t{0};
  std::atomic<uint64_t> mean_{kUnknown};
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
  // Kept across syncs like `active`.
  std::shared_ptr<ConnectionSizes> sizes = std::make_shared<ConnectionSizes>();
};

// The data path's view of the service table: immutable, posted to every worker after a sync.
using RouteTable = std::map<ListenKey, Route>;
using RouteTablePtr = std::shared_ptr<const RouteTable>;

}  // namespace sluice::proxy
