// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "lib/net/address.h"

namespace sluice::vip {

// Makes service VIPs (ClusterIPs, external IPs) locally deliverable so the proxy can bind
// listeners on them. It adds an address only when no interface already has it, and it removes
// only addresses it added, in this run or an earlier one. Destroying a manager leaves its
// addresses in place, so that a restart does not interrupt the services; the next instance adopts
// or removes them in Reconcile.
// Thread: control plane (the Proxier's sync), one caller at a time.
class VipManager {
 public:
  virtual ~VipManager() = default;

  // Makes `ip` local: adds it (/32 or /128) on the VIP interface unless it is local already.
  // InvalidArgument for 0.0.0.0 and ::.
  virtual absl::Status Ensure(const net::IpAddress& ip) = 0;
  // Removes `ip` if it is ours; otherwise does nothing.
  virtual absl::Status Release(const net::IpAddress& ip) = 0;
  // Converges on `wanted`: ensures each one and removes every other address of ours. Called at
  // start and on every sync. Between full scans it diffs `wanted` against the VIPs it owns, so a
  // sync costs what changed; a full scan reads the kernel's addresses, adopting or removing
  // leftovers of an earlier run and repairing changes made behind its back. It scans on the first
  // call, after a failure and after MarkStale(). Best effort: it tries every change and returns
  // the first error, with the number of failures.
  virtual absl::Status Reconcile(const absl::flat_hash_set<net::IpAddress>& wanted) = 0;
  // Reconcile for a change: makes `add` local and removes those of `remove` that are ours,
  // against the VIPs it owns (no scan), so a sync costs what changed. Best effort, as Reconcile;
  // a failure makes the next Reconcile scan.
  virtual absl::Status Update(const std::vector<net::IpAddress>& add,
                              const std::vector<net::IpAddress>& remove) = 0;
  // Makes the next Reconcile a full scan. The periodic resync (--sync-period) calls it.
  virtual void MarkStale() = 0;
  // Removes every address of ours. The clean-shutdown path.
  virtual absl::Status RemoveAll() = 0;

  // The VIPs this manager currently owns (added, or adopted from an earlier run).
  virtual const absl::flat_hash_set<net::IpAddress>& Owned() const = 0;
  // The interface that new VIPs go on, e.g. "sluice0" or "lo".
  virtual std::string interface_name() const = 0;
};

}  // namespace sluice::vip
