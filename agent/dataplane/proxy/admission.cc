// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/admission.h"

#include <sys/resource.h>

#include <algorithm>

namespace sluice::proxy {

int64_t FdBudget::ForProcess(int64_t reserve) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    lim.rlim_cur = 1 << 20;  // the kernel's default fs.nr_open
  }
  const auto limit = static_cast<int64_t>(lim.rlim_cur);
  return std::max(limit - reserve, limit / 2);
}

bool SourceCounter::TryAdd(const net::IpAddress& ip) {
  size_t& n = counts_[ip];
  if (n >= per_source_) {
    if (n == 0) {
      counts_.erase(ip);  // a cap of 0 admits nobody; keep no empty entry
    }
    return false;
  }
  ++n;
  return true;
}

void SourceCounter::Remove(const net::IpAddress& ip) {
  auto it = counts_.find(ip);
  if (it != counts_.end() && --it->second == 0) {
    counts_.erase(it);
  }
}

size_t SourceCounter::Count(const net::IpAddress& ip) const {
  auto it = counts_.find(ip);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace sluice::proxy
