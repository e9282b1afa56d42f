// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "simdjson.h"

// coordination.k8s.io/v1 Leases as upstream Konnectivity uses them to count proxy servers: each
// server (--enable-lease-controller) holds one, named after its ID and labelled --lease-label;
// agents (--count-server-leases) count the unexpired ones.
namespace sluice::tunnel::wire {

// Upstream's constants (cmd/server/app: LeaseDuration, LeaseRenewalInterval, LeaseGCInterval).
inline constexpr absl::Duration kLeaseDuration = absl::Seconds(30);
inline constexpr absl::Duration kLeaseRenewInterval = absl::Seconds(15);
inline constexpr absl::Duration kLeaseGcInterval = absl::Seconds(15);

struct Lease {
  std::string name;
  std::string resource_version;
  std::string holder;
  absl::Time renewed = absl::InfinitePast();  // renewTime, else acquireTime
  absl::Duration duration = absl::ZeroDuration();
};

// The fields above from a Lease object.
absl::StatusOr<Lease> ParseLease(const simdjson::dom::element& object);
// Unexpired: renewed + duration is after `now`, as upstream's IsLeaseValid. A lease with no
// time is expired.
bool LeaseValid(const Lease& lease, absl::Time now);

// "k=v,k2=v2" (--lease-label) as labels; an error names the bad part.
absl::StatusOr<std::map<std::string, std::string>> ParseLeaseLabels(std::string_view text);
// The labels as a selector, sorted by key (Kubernetes' labels.FormatLabels).
std::string LeaseSelector(const std::map<std::string, std::string>& labels);

// "/apis/coordination.k8s.io/v1/namespaces/NS/leases" and ".../NAME".
std::string LeasesPath(std::string_view name_space, std::string_view name = "");
// A Lease held by `holder`, renewed `now`, as JSON; with `resource_version` for an update.
std::string LeaseJson(std::string_view name_space, std::string_view name,
                      const std::map<std::string, std::string>& labels, std::string_view holder,
                      absl::Duration duration, absl::Time now,
                      std::string_view resource_version = "");
// metav1.MicroTime as the API server writes it: "2006-01-02T15:04:05.000000Z".
std::string MicroTime(absl::Time t);

}  // namespace sluice::tunnel::wire
