// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"

#include "agent/control/config/model.h"
#include "agent/control/proxier/service_table.h"

namespace sluice::proxier {

// Caps on the userspace proxy's listening addresses (service port x address with endpoints).
struct ListenerCaps {
  size_t max_listeners = 32768;             // node-wide
  size_t max_listeners_per_service = 4096;  // one Service, all of its ports
};

// Which Services get listeners, and why the others do not.
struct ListenerAdmission {
  absl::flat_hash_set<config::NamespacedName> services;                       // served
  absl::flat_hash_map<config::NamespacedName, std::string> skipped_services;  // -> reason
  std::map<std::string, std::string> skipped;   // service port -> reason
  std::map<std::string, size_t> skipped_ports;  // "service_cap"/"node_cap" -> ports
};

// How many listeners one service port needs.
using ListenerCount = absl::FunctionRef<size_t(const ServicePortInfo&)>;

// Admits whole Services: none over the per-Service cap; then, within the node-wide cap, those
// admitted last time first (a newcomer never displaces a running Service), then the smallest
// first (one big Service cannot crowd out many small ones), then by name. O(services log
// services) after one pass over the ports.
ListenerAdmission AdmitServices(const ServiceTable& table, const ListenerCaps& caps,
                                const absl::flat_hash_set<config::NamespacedName>& before,
                                ListenerCount count);

// The listeners all ports of `service` in `table` need (its ports are contiguous there).
size_t ServiceListeners(const ServiceTable& table, const config::NamespacedName& service,
                        ListenerCount count);

}  // namespace sluice::proxier
