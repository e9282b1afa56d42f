// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "client.grpc.pb.h"
#include "lib/event/event_loop.h"

#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"
#include "tunnel/wire/byte_budget.h"
#include "tunnel/wire/stall_watch.h"

namespace sluice::tunnel::server {

// ProxyService/Proxy for gRPC frontends (kube-apiserver): one reactor per stream, one dial
// per stream (proxy_service.cc). `loop` runs deferred finishes. Thread-safe.
class ProxyService final : public ::ProxyService::CallbackService {
 public:
  // `budget` (optional) is the server-wide byte budget (wire::ByteBudget); it outlives us.
  // `stall_timeout`: with an agent without the window extension, how long a client may read
  // nothing while bytes wait for it before it is cut (wire::StallWatch).
  ProxyService(Router& router, ServerMetrics& metrics, event::EventLoop& loop, size_t max_queued,
               wire::ByteBudget* budget = nullptr,
               absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout)
      : router_(router),
        metrics_(metrics),
        loop_(loop),
        max_queued_(max_queued),
        budget_(budget),
        stall_timeout_(stall_timeout) {}

  grpc::ServerBidiReactor<wire::Packet, wire::Packet>* Proxy(
      grpc::CallbackServerContext* context) override;

 private:
  Router& router_;
  ServerMetrics& metrics_;
  event::EventLoop& loop_;
  const size_t max_queued_;
  wire::ByteBudget* const budget_;
  const absl::Duration stall_timeout_;
};

}  // namespace sluice::tunnel::server
