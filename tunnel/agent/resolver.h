// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "lib/net/address.h"

namespace sluice::tunnel::agent {

// Name resolution for dials: a system seam (DNS), so that tests and fuzzers can dial host
// names without reaching a real resolver. Implementations: GetaddrinfoResolver, FakeResolver
// (fake_resolver.h). Thread-safe.
class Resolver {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<net::IpAddress>)>;
  virtual ~Resolver() = default;

  // `done` runs exactly once, on any thread and possibly before Resolve returns (callers post
  // the result to their loop), unless the resolver is destroyed first. Error texts follow Go's
  // resolver: "lookup <host>: no such host".
  virtual void Resolve(std::string host, Done done) = 0;
};

// Resolves host names with getaddrinfo(3), which blocks, on its own thread so the tunnel loop
// never waits for DNS. Results come back through the callback on the resolver thread. Thread-safe;
// the destructor drops queued lookups and joins.
class GetaddrinfoResolver final : public Resolver {
 public:
  GetaddrinfoResolver();
  ~GetaddrinfoResolver() override;
  GetaddrinfoResolver(const GetaddrinfoResolver&) = delete;
  GetaddrinfoResolver& operator=(const GetaddrinfoResolver&) = delete;

  // Resolver
  void Resolve(std::string host, Done done) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();
  absl::Mutex mu_;
  std::deque<std::pair<std::string, Done>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace sluice::tunnel::agent
