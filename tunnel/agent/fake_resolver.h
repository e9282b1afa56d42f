// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

#include "tunnel/agent/resolver.h"

namespace sluice::tunnel::agent {

// A Resolver that answers from a table, before Resolve returns, and records every name it was
// asked for: dials in unit tests and fuzzers never reach DNS. Unknown names fail as
// getaddrinfo's would. Thread-safe.
class FakeResolver final : public Resolver {
 public:
  void Add(const std::string& host, const net::IpAddress& ip) {
    absl::MutexLock lock(&mu_);
    table_.insert_or_assign(host, ip);
  }
  std::vector<std::string> asked() const {
    absl::MutexLock lock(&mu_);
    return asked_;
  }

  // Resolver
  void Resolve(std::string host, Done done) override {
    absl::StatusOr<net::IpAddress> result =
        absl::NotFoundError(absl::StrCat("lookup ", host, ": no such host"));
    {
      absl::MutexLock lock(&mu_);
      asked_.push_back(host);
      if (auto it = table_.find(host); it != table_.end()) {
        result = it->second;
      }
    }
    done(std::move(result));
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, net::IpAddress> table_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> asked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::tunnel::agent
