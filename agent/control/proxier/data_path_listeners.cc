// SPDX-License-Identifier: Apache-2.0
// DataPath's listeners: opening and closing sockets, the caps, and what is skipped.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/socket.h"

#include "agent/control/proxier/data_path.h"
#include "agent/dataplane/fastpath/reuseport_balancer.h"

namespace sluice::proxier {

absl::StatusOr<size_t> DataPath::OpenListener(const proxy::ListenKey& key) {
  const bool udp = key.transport == proxy::Transport::kUdp;
  // A reuseport group pays for a busy TCP address (no shared accept queue, and the balancer
  // deals connections in turn), at one socket per worker: only while the groups fit.
  const bool group =
      !udp && workers_.size() > 1 && group_sockets_ + workers_.size() <= options_.reuseport_sockets;
  const size_t count = group ? workers_.size() : 1;
  if (fds_.Full(static_cast<int64_t>(count))) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "listen ", key.ToString(), ": the data path holds ", fds_.used(), " of its ", fds_.limit(),
        " descriptors (the rest, --fd-reserve, is the control plane's)"));
  }
  if (udp) {
    auto fd = net::BindUdp(key.address, /*reuseport=*/true);
    if (!fd.ok()) {
      return base::Annotate(fd.status(), absl::StrCat("listen ", key.ToString()));
    }
    workers_[udp_turn_++ % workers_.size()]->AddUdpListener(key, std::move(*fd));
    fds_.Take(1);
    return 1;
  }
  std::vector<std::shared_ptr<const base::UniqueFd>> fds;
  for (size_t i = 0; i < count; ++i) {
    auto fd = net::ListenTcp(key.address, /*reuseport=*/true, options_.backlog);
    if (!fd.ok()) {
      return base::Annotate(fd.status(), absl::StrCat("listen ", key.ToString()));
    }
    fds.push_back(std::make_shared<const base::UniqueFd>(std::move(*fd)));
  }
  // Worker i's socket joined the group i-th: the program's index is the worker. A failure
  // leaves this group on the kernel's hash; connections are served either way.
  if (group && options_.tcp_balancer != nullptr) {
    if (absl::Status st = options_.tcp_balancer->Attach(fds[0]->get()); !st.ok()) {
      LOG(WARNING) << "listen " << key.ToString() << ": " << st
                   << " (new connections are spread by the kernel's hash)";
    }
  }
  for (size_t i = 0; i < workers_.size(); ++i) {
    workers_[i]->AddTcpListener(key, fds[group ? i : 0], /*shared=*/!group);
  }
  fds_.Take(static_cast<int64_t>(count));
  group_sockets_ += group ? count : 0;
  return count;
}

void DataPath::CloseListener(const proxy::ListenKey& key, const Open& open) {
  for (auto& w : workers_) {
    w->RemoveListener(key);  // a no-op on the workers that do not serve it
  }
  fds_.Give(static_cast<int64_t>(open.sockets));
  sockets_ -= open.sockets;
  if (open.sockets > 1) {
    group_sockets_ -= open.sockets;
  }
}

void DataPath::ListenFailed(const proxy::ListenKey& key, const std::string& service,
                            const absl::Status& status) {
  metrics_.listener_failures.Inc();
  auto [it, added] = failed_.try_emplace(key);
  if (added) {  // logged when it starts failing, not at every retry
    LOG(WARNING) << "service " << service << ": " << status
                 << " (the other listeners serve; retried at every sync)";
  }
  it->second = {service, std::string(status.message())};
}

bool DataPath::Listen(std::map<proxy::ListenKey, Open>::iterator hint, const proxy::ListenKey& key,
                      const std::string& service) {
  absl::StatusOr<size_t> sockets = OpenListener(key);
  if (!sockets.ok()) {
    ListenFailed(key, service, sockets.status());
    return false;
  }
  open_.emplace_hint(hint, key, Open{service, *sockets});
  sockets_ += *sockets;
  failed_.erase(key);
  return true;
}

bool DataPath::SyncListeners(const proxy::RouteTable& routes,
                             const std::vector<proxy::ListenKey>* keys,
                             std::vector<proxy::ListenKey>& closed) {
  bool opened = false;
  // Held while listeners open: Listeners() (the admin thread) reads open_, no worker does.
  absl::MutexLock lock(&mu_);
  // A closed listener stays in open_ (and in /debug/services) until Apply has seen every
  // worker close its socket: Apply erases it after the Flush.
  auto close = [&](std::map<proxy::ListenKey, Open>::iterator it) {
    CloseListener(it->first, it->second);
    closed.push_back(it->first);
    return std::next(it);
  };
  if (keys != nullptr) {
    // Only the addresses of changed ports, and those that failed before (retried every sync).
    std::vector<proxy::ListenKey> retry;
    for (const auto& [key, failure] : failed_) {
      if (!std::binary_search(keys->begin(), keys->end(), key)) {
        retry.push_back(key);
      }
    }
    const std::vector<proxy::ListenKey>* lists[] = {keys, &retry};
    for (const auto* list : lists) {
      for (const proxy::ListenKey& key : *list) {
        auto route = routes.find(key);
        auto it = open_.find(key);
        if (route == routes.end()) {
          if (it != open_.end()) {
            close(it);
          }
        } else if (it != open_.end()) {
          it->second.service = route->second.service;
        } else {
          opened = Listen(open_.lower_bound(key), key, route->second.service) || opened;
        }
      }
    }
  } else {
    // Both maps are sorted by key: one merge walk, no lookups.
    auto it = open_.begin();
    for (const auto& [key, route] : routes) {
      while (it != open_.end() && it->first < key) {
        it = close(it);
      }
      if (it != open_.end() && it->first == key) {
        it->second.service = route.service;
        ++it;
      } else {
        opened = Listen(it, key, route.service) || opened;
      }
    }
    while (it != open_.end()) {
      it = close(it);
    }
  }
  std::erase_if(failed_, [&](const auto& entry) { return !routes.contains(entry.first); });
  metrics_.listeners.Set(static_cast<double>(sockets_));
  metrics_.unserved_ports.WithLabels({"listen_failed"}).Set(static_cast<double>(failed_.size()));
  return opened || !closed.empty();
}

void DataPath::Admitted(ListenerAdmission admission) {
  for (const auto& [service, reason] : admission.skipped_services) {
    if (!skipped_services_.contains(service)) {  // logged when it starts, not at every sync
      LOG(WARNING) << "service " << service.ToString() << " " << reason;
    }
  }
  for (const auto& [service, reason] : skipped_services_) {
    if (!admission.skipped_services.contains(service)) {
      LOG(INFO) << "service " << service.ToString() << " is no longer skipped";
    }
  }
  for (const char* reason : {"service_cap", "node_cap"}) {
    metrics_.unserved_ports.WithLabels({reason}).Set(
        static_cast<double>(admission.skipped_ports[reason]));
  }
  skipped_services_ = std::move(admission.skipped_services);
  admitted_ = std::move(admission.services);
  absl::MutexLock lock(&mu_);
  skipped_ = std::move(admission.skipped);
}

bool DataPath::CapsInvolved(const std::vector<const ServicePortInfo*>& infos,
                            const ServiceTable& table) {
  absl::flat_hash_set<config::NamespacedName> seen;
  for (const ServicePortInfo* info : infos) {
    const config::NamespacedName& service = info->name.service;
    if (!seen.insert(service).second) {
      continue;
    }
    if (skipped_services_.contains(service) ||
        ServiceListeners(table, service, [this](const ServicePortInfo& i) {
          return ListenerCount(i);
        }) > options_.caps.max_listeners_per_service) {
      return true;
    }
  }
  return false;
}

std::map<std::string, std::vector<std::string>> DataPath::Listeners() const {
  std::map<std::string, std::vector<std::string>> view;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, open] : open_) {
    view[open.service].push_back(key.ToString());
  }
  return view;
}

std::map<std::string, std::string> DataPath::Unserved() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> view = skipped_;
  for (const ServicePortName& name : sctp_) {
    view.emplace(name.ToString(), absl::StrCat("SCTP: ", kSctpUnserved));
  }
  for (const auto& [key, failure] : failed_) {
    view.try_emplace(failure.first, absl::StrCat("listen ", key.ToString(), " failed: ",
                                                 failure.second, " (retried at every sync)"));
  }
  return view;
}

}  // namespace sluice::proxier
