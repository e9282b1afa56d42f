// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "agent/config/json_field.h"
#include "agent/config/model.h"

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
                                               std::string_view implied_api_version);
absl::StatusOr<EndpointSlicePtr> DecodeEndpointSliceObject(const ObjectField& object,
                                                           std::string_view implied_api_version);

// apiVersion must equal `want` (or be absent with implied == want).
absl::Status CheckApiVersion(const ObjectField& object, std::string_view want,
                             std::string_view implied);

// metadata: name required, namespace defaulting to "default", string-valued labels/annotations.
absl::Status DecodeObjectMeta(const ObjectField& object, ObjectMeta* meta);

// Appends the IP in `text` to `out`; `must be a valid IP address, got "..."` otherwise.
absl::Status AppendIp(const Field& at, std::string_view text, std::vector<net::IpAddress>* out);

}  // namespace sluice::config
