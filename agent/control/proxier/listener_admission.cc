// SPDX-License-Identifier: Apache-2.0
#include "agent/control/proxier/listener_admission.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sluice::proxier {
namespace {

using PortIt = ServicePortMap::const_iterator;

// One Service's ports in the table and the listeners they need.
struct Demand {
  PortIt first, last;
  size_t listeners = 0;
  bool before = false;
  const config::NamespacedName& name() const { return first->first.service; }
};

void Skip(ListenerAdmission& out, const Demand& d, const char* reason, const std::string& why) {
  out.skipped_services[d.name()] = why;
  for (PortIt it = d.first; it != d.last; ++it) {
    out.skipped[it->first.ToString()] = why;
  }
  out.skipped_ports[reason] += static_cast<size_t>(std::distance(d.first, d.last));
}

}  // namespace

size_t ServiceListeners(const ServiceTable& table, const config::NamespacedName& service,
                        ListenerCount count) {
  size_t n = 0;
  for (auto it = table.ports().lower_bound(ServicePortName{.service = service, .port = ""});
       it != table.ports().end() && it->first.service == service; ++it) {
    n += count(*it->second);
  }
  return n;
}

ListenerAdmission AdmitServices(const ServiceTable& table, const ListenerCaps& caps,
                                const absl::flat_hash_set<config::NamespacedName>& before,
                                ListenerCount count) {
  ListenerAdmission out;
  std::vector<Demand> demands;
  const auto& ports = table.ports();
  for (PortIt it = ports.begin(); it != ports.end();) {
    Demand d{.first = it, .last = it};
    while (d.last != ports.end() && d.last->first.service == d.name()) {
      d.listeners += count(*d.last->second);
      ++d.last;
    }
    it = d.last;
    if (d.listeners > caps.max_listeners_per_service) {
      Skip(out, d, "service_cap",
           absl::StrCat(
               "skipped: the Service needs ", d.listeners,
               " listeners, over --max-listeners-per-service=", caps.max_listeners_per_service));
      continue;
    }
    d.before = before.contains(d.name());
    demands.push_back(d);
  }
  std::sort(demands.begin(), demands.end(), [](const Demand& a, const Demand& b) {
    return std::forward_as_tuple(!a.before, a.listeners, a.name()) <
           std::forward_as_tuple(!b.before, b.listeners, b.name());
  });
  size_t total = 0;
  for (const Demand& d : demands) {
    if (total + d.listeners > caps.max_listeners) {
      Skip(out, d, "node_cap",
           absl::StrCat("skipped: the Service needs ", d.listeners, " listeners and the node ",
                        "has ", caps.max_listeners - total,
                        " left of --max-listeners=", caps.max_listeners));
      continue;
    }
    total += d.listeners;
    out.services.insert(d.name());
  }
  return out;
}

}  // namespace sluice::proxier
