// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/kube/bearer_token.h"
#include "lib/kube/client_config.h"
#include "lib/kube/http_client.h"
#include "simdjson.h"

#include "tunnel/wire/lease.h"

namespace sluice::tunnel::server {

struct LeaseOptions {
  std::string server_id;  // the holder; the Lease is "konnectivity-proxy-server-<server_id>"
  std::string name_space;
  std::map<std::string, std::string> labels;
  absl::Duration duration = wire::kLeaseDuration;
  absl::Duration renew_interval = wire::kLeaseRenewInterval;
  absl::Duration gc_interval = wire::kLeaseGcInterval;
  const base::Clock* clock = &base::RealClock::Get();
  base::Counter* culled = nullptr;  // upstream's culled_leases_count
};

// Upstream proxy-server's --enable-lease-controller: keeps this server's Lease in
// --lease-namespace (created when missing, renewed every renew_interval), and deletes the
// Leases with --lease-label that expired (their holder is gone), so that agents counting
// Leases (--count-server-leases) see how many servers run. A delete carries the resourceVersion
// it saw as a precondition, so a Lease renewed meanwhile survives. Owns a thread and one
// kept-alive API connection. Thread-safe (Start/destructor: the owner's).
class LeaseController final {
 public:
  static absl::StatusOr<std::unique_ptr<LeaseController>> Create(const kube::ClientConfig& config,
                                                                 LeaseOptions options);
  ~LeaseController();  // stops and joins
  LeaseController(const LeaseController&) = delete;
  LeaseController& operator=(const LeaseController&) = delete;

  // Runs renewals and garbage collection on the controller's thread until destruction.
  void Start();

  // One renewal (or creation) of our Lease, and one garbage collection pass: what the thread
  // runs, callable directly (tests; not while the thread runs).
  absl::Status Renew();
  // The number of Leases deleted.
  absl::StatusOr<int> CollectGarbage();

  std::string lease_name() const { return "konnectivity-proxy-server-" + options_.server_id; }

 private:
  LeaseController(LeaseOptions options, std::unique_ptr<kube::BearerToken> token);
  void Run();
  absl::Status CreateLease();
  // A request whose 2xx body is kept in `body`.
  absl::StatusOr<kube::HttpResponse> Call(const char* method, const std::string& target,
                                          const std::string& request, std::string* body);

  const LeaseOptions options_;
  std::unique_ptr<kube::BearerToken> token_;
  std::unique_ptr<kube::HttpClient> client_;  // the controller thread's only
  simdjson::dom::parser parser_;
  std::string resource_version_;  // of our Lease as last written; empty: unknown
  base::Waiter wait_;  // the controller thread's: renew and GC periods; stopped at destruction
  std::thread thread_;
};

}  // namespace sluice::tunnel::server
