// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"
#include "lib/net/address.h"

#include "agent/dataplane/proxy/load_balancer.h"

namespace sluice::proxy {

class BackendDialer;

// Why a dial attempt failed, for sluice_dial_failures_total{reason}.
enum class DialFailure {
  kRefused,
  kTimeout,
  kUnreachable,
  kOther,
  kNoEndpoint,
  kLocalResources,  // no fd or buffer for the socket: the dial gives up at once (shedding)
};
const char* DialFailureName(DialFailure f);

class BackendDialerCallbacks {
 public:
  virtual ~BackendDialerCallbacks() = default;
  // Each failed attempt (the dialer goes on unless the budget is spent).
  virtual void OnDialAttemptFailed(DialFailure reason) = 0;
  // Exactly one of these ends the dial; the owner then DeferDeletes the dialer.
  // `backend` is still in the loop's epoll set, its watch detached: register it with
  // EventLoop::Adopt (or close it).
  virtual void OnDialed(BackendDialer& dialer, base::UniqueFd backend) = 0;
  virtual void OnDialGaveUp(BackendDialer& dialer) = 0;
};

// Connects a new client to one endpoint of a service: non-blocking connect with a per-attempt
// timeout; a failed endpoint is excluded and the next one tried at once (its client's affinity
// reset); when every endpoint failed, waits a backoff and tries them all again, until the
// total budget is spent. The per-attempt timeouts and backoffs (250 ms doubling to 2 s) follow
// the userspace kube-proxy's retry schedule. Thread: owning worker loop.
class BackendDialer final : public event::DeferredDeletable {
 public:
  BackendDialer(event::EventLoop& loop, std::shared_ptr<Balancer> balancer, net::IpAddress client,
                absl::Duration budget, BackendDialerCallbacks& callbacks);
  ~BackendDialer() override;

  // Starts the first attempt; callbacks may run from within this call.
  void Start();
  const net::SocketAddress& endpoint() const { return endpoint_; }

 private:
  void Attempt();
  void OnWritable();
  void Failed(DialFailure reason);
  void GiveUp();
  // Unregisters the attempt's watch (possibly from inside its own callback) and keeps it until
  // the dialer is freed.
  void RetireWatch();

  event::EventLoop& loop_;
  const std::shared_ptr<Balancer> balancer_;
  const net::IpAddress client_;
  const base::MonoTime deadline_;
  BackendDialerCallbacks& callbacks_;
  std::vector<net::SocketAddress> failed_;
  int attempt_ = 0;
  int round_ = 0;
  bool done_ = false;
  net::SocketAddress endpoint_;
  base::UniqueFd fd_;
  std::unique_ptr<event::FileEvent> watch_;  // after fd_: unregisters before the close
  std::vector<std::unique_ptr<event::FileEvent>> retired_;  // cancelled; at most one per attempt
  std::unique_ptr<event::Timer> timer_;
};

}  // namespace sluice::proxy
