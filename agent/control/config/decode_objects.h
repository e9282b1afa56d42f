// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "agent/control/config/decode.h"
#include "agent/control/config/json_field.h"
#include "agent/control/config/model.h"

// Per-kind decoders behind decode.h (internal to config/). Errors are Field errors: the message
// is the reason and FieldPathOf() gives the path within the object.

namespace sluice::config {

inline constexpr EnumName<Protocol> kProtocols[] = {
    {"TCP", Protocol::kTcp},
    {"UDP", Protocol::kUdp},
    {"SCTP", Protocol::kSctp},
};

// `implied_api_version` stands in for an absent apiVersion: the kube source's list items and
// the items of a typed list such as ServiceList carry none. Pass "" to require it.
absl::StatusOr<ServicePtr> DecodeServiceObject(const ObjectField& object,
                                               std::string_view implied_api_version,
                                               const AddressPolicy& policy);
absl::StatusOr<EndpointSlicePtr> DecodeEndpointSliceObject(const ObjectField& object,
                                                           std::string_view implied_api_version,
                                                           const AddressPolicy& policy);

// apiVersion must equal `want` (or be absent with implied == want).
absl::Status CheckApiVersion(const ObjectField& object, std::string_view want,
                             std::string_view implied);

// metadata: name required, namespace defaulting to "default", string-valued labels/annotations.
absl::Status DecodeObjectMeta(const ObjectField& object, ObjectMeta* meta);

// Special ranges an address field may not hold, as flags.
enum SpecialRanges : unsigned {
  kNoSpecialRanges = 0,
  kUnspecified = 1,
  kLoopback = 2,
  kLinkLocal = 4,           // unicast: 169.254.0.0/16, fe80::/10
  kLinkLocalMulticast = 8,  // 224.0.0.0/24, ff02::/16
  kMulticast = 16,          // all of it: 224.0.0.0/4, ff00::/8
  // ValidateNonSpecialIP's set.
  kApiServerSpecial = kUnspecified | kLoopback | kLinkLocal | kLinkLocalMulticast,
};

// The ranges `policy` refuses in clusterIPs, externalIPs and LB ingress IPs (kEndpoint: in
// EndpointSlice addresses); see AddressPolicy.
enum class AddressField { kClusterIp, kExternalIp, kIngressIp, kEndpoint };
unsigned RefusedRanges(const AddressPolicy& policy, AddressField field);

// `may not be in the loopback range (127.0.0.0/8, ::1/128), got "127.0.0.1"` at `at` when `ip`
// (parsed from `text`) lies in one of the `refused` ranges.
absl::Status CheckSpecialIp(const Field& at, std::string_view text, const net::IpAddress& ip,
                            unsigned refused);

// Appends the IP in `text` to `out`; `must be a valid IP address, got "..."` otherwise, or
// CheckSpecialIp's error.
absl::Status AppendIp(const Field& at, std::string_view text, std::vector<net::IpAddress>* out,
                      unsigned refused);

}  // namespace sluice::config
