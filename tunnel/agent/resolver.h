// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "agent/net/address.h"

namespace sluice::agent {

// Resolves host names with getaddrinfo(3), which blocks, on its own thread so the IoLoop never
// waits for DNS. Results come back through the callback on the resolver thread (callers post
// them to their loop). Thread-safe; the destructor drops queued lookups and joins.
class Resolver final {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<net::IpAddress>)>;
  Resolver();
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Error texts follow Go's resolver: "lookup <host>: no such host".
  void Resolve(std::string host, Done done) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();
  absl::Mutex mu_;
  std::deque<std::pair<std::string, Done>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::agent
