// SPDX-License-Identifier: Apache-2.0
#include "agent/control/admin/service_health.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/log.h"

namespace sluice::admin {

namespace {

// The entries of `service` in the table (ServicePortName orders by service first).
template <typename Fn>
void ForEachPort(const proxier::ServiceTable& table, const config::NamespacedName& service,
                 Fn&& fn) {
  const auto& ports = table.ports();
  for (auto it = ports.lower_bound(proxier::ServicePortName{service, "", config::Protocol::kTcp});
       it != ports.end() && it->first.service == service; ++it) {
    fn(*it->second);
  }
}

}  // namespace

std::map<config::NamespacedName, int> HealthCheckPorts(const proxier::ServiceTable& table) {
  std::map<config::NamespacedName, int> out;
  for (const auto& [name, info] : table.ports()) {
    if (info->health_check_node_port != 0) {
      out[name.service] = info->health_check_node_port;
    }
  }
  return out;
}

int LocalReadyEndpoints(const proxier::ServiceTable& table, const config::NamespacedName& service,
                        const std::string& node) {
  // kube-proxy runs one proxier per family, each writing its own family's count into the one
  // health server: a dual-stack pod counts once, not twice.
  std::set<net::IpAddress> v4, v6;
  ForEachPort(table, service, [&](const proxier::ServicePortInfo& info) {
    for (const auto& ep : info.endpoints) {
      if (ep.ready && ep.node_name == node) {
        (ep.address.ip().is_v4() ? v4 : v6).insert(ep.address.ip());
      }
    }
  });
  return static_cast<int>(std::max(v4.size(), v6.size()));
}

http::StatusServer::Reply ServiceHealthReply(const config::NamespacedName& service,
                                             int local_endpoints, bool proxy_healthy) {
  // kube-proxy prints a tab-indented template through dedent.Dedent (which strips the common
  // two-tab margin) and strings.Trim(..., "\n"): this is its output. Its %q and a JSON string
  // agree on every valid object name (DNS labels and subdomains).
  std::string body =
      absl::StrCat("{\n\t\"service\": {\n\t\t\"namespace\": ", base::JsonString(service.ns),
                   ",\n\t\t\"name\": ", base::JsonString(service.name),
                   "\n\t},\n\t\"localEndpoints\": ", local_endpoints,
                   ",\n\t\"serviceProxyHealthy\": ", proxy_healthy ? "true" : "false", "\n}");
  return http::StatusServer::Reply{
      .code = local_endpoints != 0 && proxy_healthy ? 200 : 503,
      .body = std::move(body),
      .content_type = "application/json",
      .headers = {{"X-Content-Type-Options", "nosniff"},
                  {"X-Load-Balancing-Endpoint-Weight", absl::StrCat(local_endpoints)}}};
}

ServiceHealthServers::ServiceHealthServers(Options options) : options_(std::move(options)) {
  if (options_.metrics != nullptr) {
    failures_ = &options_.metrics->AddCounter(
        "sluice_service_health_check_listen_errors_total",
        "Failed attempts to open a service's health check node port (kube-proxy's event "
        "FailedToStartServiceHealthcheck); each sync tries again",
        {"service"});
  }
}

// The servers' threads read mu_ and endpoints_: they stop before those go.
ServiceHealthServers::~ServiceHealthServers() { open_.clear(); }

absl::Status ServiceHealthServers::Apply(const proxier::TableDelta& delta) {
  const proxier::ServiceTable& table = *delta.table;
  // The services to redo: those with a changed port, and those whose server failed to open
  // (retried at every sync); in a full sync, every one that has or had a server.
  std::set<config::NamespacedName> services;
  for (const auto& [service, error] : failing_) {
    services.insert(service);
  }
  if (delta.full) {
    for (const auto& [service, instance] : open_) {
      services.insert(service);
    }
    for (const auto& [service, port] : HealthCheckPorts(table)) {
      services.insert(service);
    }
  } else {
    for (const proxier::PortChange& change : delta.changes) {
      services.insert(change.name.service);
    }
  }
  std::map<config::NamespacedName, int> wanted;
  for (const auto& service : services) {
    ForEachPort(table, service, [&](const proxier::ServicePortInfo& info) {
      if (info.health_check_node_port != 0) {
        wanted[service] = info.health_check_node_port;
      }
    });
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& service : services) {
      if (wanted.contains(service)) {
        endpoints_[service] = LocalReadyEndpoints(table, service, options_.node_name);
      } else {
        endpoints_.erase(service);
      }
    }
  }
  // Closed first, so a port moving from one service to another is free for the second.
  for (const auto& service : services) {
    auto it = open_.find(service);
    auto w = wanted.find(service);
    if (it == open_.end() || (w != wanted.end() && w->second == it->second.port)) {
      continue;
    }
    LOG(INFO) << "closing the health check of service " << service.ToString() << " on port "
              << it->second.port;
    open_.erase(it);  // stops and joins its servers
  }
  for (const auto& [service, port] : wanted) {
    if (open_.contains(service)) {
      continue;
    }
    absl::StatusOr<Instance> instance = Listen(service, port);
    if (!instance.ok()) {
      ReportFailure(service, port, instance.status());
      continue;
    }
    LOG(INFO) << "opened the health check of service " << service.ToString() << " on port " << port;
    failing_.erase(service);
    open_.emplace(service, *std::move(instance));
  }
  std::erase_if(failing_, [&](const auto& entry) {
    return services.contains(entry.first) && !wanted.contains(entry.first);
  });
  return absl::OkStatus();
}

absl::StatusOr<ServiceHealthServers::Instance> ServiceHealthServers::Listen(
    const config::NamespacedName& service, int port) {
  const std::vector<std::string> hosts =
      options_.listen_hosts ? options_.listen_hosts() : std::vector<std::string>{""};
  auto routes = [this, service] {
    return std::vector<http::StatusServer::Route>{
        {"*", [this, service] { return Answer(service); }}};
  };
  Instance instance{.port = port};
  for (const std::string& host : hosts) {
    absl::StatusOr<std::unique_ptr<http::StatusServer>> server =
        http::StatusServer::Create(host.empty() ? "::" : host, port, routes());
    if (host.empty()) {
      // Go's listener on 0.0.0.0 takes IPv4 and IPv6: [::] does that unless
      // net.ipv6.bindv6only is 1, when 0.0.0.0 binds beside it; 0.0.0.0 alone without IPv6.
      absl::StatusOr<std::unique_ptr<http::StatusServer>> v4 =
          http::StatusServer::Create("0.0.0.0", port, routes());
      if (v4.ok()) {
        instance.servers.push_back(*std::move(v4));
        if (!server.ok()) {
          continue;
        }
      }
    }
    if (!server.ok()) {
      return server.status();  // `instance` closes what it opened, so a later sync can retry
    }
    instance.servers.push_back(*std::move(server));
  }
  return instance;
}

void ServiceHealthServers::ReportFailure(const config::NamespacedName& service, int port,
                                         const absl::Status& error) {
  if (failures_ != nullptr) {
    failures_->WithLabels({service.ToString()}).Inc();
  }
  // kube-proxy's event message.
  const std::string message =
      absl::StrCat("node ", options_.node_name, " failed to start healthcheck \"",
                   service.ToString(), "\" on port ", port, ": ", error.message());
  std::string& last = failing_[service];
  if (last == message) {
    return;
  }
  last = message;
  LOG(ERROR) << "failed to start the health check of service " << service.ToString() << " on port "
             << port << " (retried at every sync): " << error.message();
  LOG(WARNING) << "event: Warning FailedToStartServiceHealthcheck Service " << service.ToString()
               << ": " << message;
}

http::StatusServer::Reply ServiceHealthServers::Answer(
    const config::NamespacedName& service) const {
  int count = 0;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = endpoints_.find(service); it != endpoints_.end()) {
      count = it->second;
    }
  }
  return ServiceHealthReply(service, count, !options_.proxy_healthy || options_.proxy_healthy());
}

std::map<config::NamespacedName, int> ServiceHealthServers::OpenPorts() const {
  std::map<config::NamespacedName, int> out;
  for (const auto& [service, instance] : open_) {
    out[service] = instance.port;
  }
  return out;
}

}  // namespace sluice::admin
