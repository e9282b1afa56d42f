// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/resolver.h"

#include <netdb.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"

namespace sluice::tunnel::agent {
namespace {

absl::StatusOr<net::IpAddress> Lookup(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    const char* why = (rc == EAI_NONAME || rc == EAI_NODATA) ? "no such host" : gai_strerror(rc);
    return absl::NotFoundError(absl::StrCat("lookup ", host, ": ", why));
  }
  auto sa = net::SocketAddress::FromSockaddr(res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (!sa) {
    return absl::NotFoundError(absl::StrCat("lookup ", host, ": no such host"));
  }
  return sa->ip();
}

}  // namespace

GetaddrinfoResolver::GetaddrinfoResolver() : thread_([this] { Run(); }) {}

GetaddrinfoResolver::~GetaddrinfoResolver() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void GetaddrinfoResolver::Resolve(std::string host, Done done) {
  absl::MutexLock lock(&mu_);
  queue_.emplace_back(std::move(host), std::move(done));
}

void GetaddrinfoResolver::Run() {
  while (true) {
    std::pair<std::string, Done> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) {
        return;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job.second(Lookup(job.first));
  }
}

}  // namespace sluice::tunnel::agent
