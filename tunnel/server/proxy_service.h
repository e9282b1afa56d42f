// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "client.grpc.pb.h"

#include "agent/event/event_loop.h"
#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"

namespace sluice::tunnel::server {

// ProxyService/Proxy for gRPC frontends (kube-apiserver): one reactor per stream, one dial
// per stream (proxy_service.cc). `loop` runs deferred finishes. Thread-safe.
class ProxyService final : public ::ProxyService::CallbackService {
 public:
  ProxyService(Router& router, ServerMetrics& metrics, event::EventLoop& loop, size_t max_queued)
      : router_(router), metrics_(metrics), loop_(loop), max_queued_(max_queued) {}

  grpc::ServerBidiReactor<wire::Packet, wire::Packet>* Proxy(
      grpc::CallbackServerContext* context) override;

 private:
  Router& router_;
  ServerMetrics& metrics_;
  event::EventLoop& loop_;
  const size_t max_queued_;
};

}  // namespace sluice::tunnel::server
