// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/lease.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/json.h"
#include "lib/base/strings.h"

namespace sluice::tunnel::wire {
namespace {

// RFC 3339 with or without fractional seconds, as metav1.Time and MicroTime are written.
bool ParseTime(std::string_view text, absl::Time* out) {
  std::string err;
  return absl::ParseTime(absl::RFC3339_full, base::Absl(text), out, &err);
}

}  // namespace

absl::StatusOr<Lease> ParseLease(const simdjson::dom::element& object) {
  Lease lease;
  std::string_view s;
  if (object["metadata"]["name"].get(s) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("lease without metadata.name");
  }
  lease.name = std::string(s);
  if (object["metadata"]["resourceVersion"].get(s) == simdjson::SUCCESS) {
    lease.resource_version = std::string(s);
  }
  simdjson::dom::element spec;
  if (object["spec"].get(spec) != simdjson::SUCCESS) {
    return lease;  // no times: expired
  }
  if (spec["holderIdentity"].get(s) == simdjson::SUCCESS) {
    lease.holder = std::string(s);
  }
  int64_t seconds = 0;
  if (spec["leaseDurationSeconds"].get(seconds) == simdjson::SUCCESS) {
    lease.duration = absl::Seconds(seconds);
  }
  absl::Time t;
  if ((spec["renewTime"].get(s) == simdjson::SUCCESS && ParseTime(s, &t)) ||
      (spec["acquireTime"].get(s) == simdjson::SUCCESS && ParseTime(s, &t))) {
    lease.renewed = t;
  }
  return lease;
}

bool LeaseValid(const Lease& lease, absl::Time now) {
  return lease.renewed != absl::InfinitePast() && lease.renewed + lease.duration > now;
}

absl::StatusOr<std::map<std::string, std::string>> ParseLeaseLabels(std::string_view text) {
  std::map<std::string, std::string> labels;
  for (absl::string_view part : absl::StrSplit(base::Absl(text), ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    const absl::string_view key = absl::StripAsciiWhitespace(kv[0]);
    if (kv.size() != 2 || key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lease-label: \"", part, "\" is not key=value"));
    }
    labels[std::string(key)] = std::string(absl::StripAsciiWhitespace(kv[1]));
  }
  if (labels.empty()) {
    return absl::InvalidArgumentError("--lease-label: no label");
  }
  return labels;
}

std::string LeaseSelector(const std::map<std::string, std::string>& labels) {
  return absl::StrJoin(labels, ",", absl::PairFormatter("="));
}

std::string LeasesPath(std::string_view name_space, std::string_view name) {
  return absl::StrCat("/apis/coordination.k8s.io/v1/namespaces/", base::Absl(name_space), "/leases",
                      name.empty() ? "" : "/", base::Absl(name));
}

std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

std::string LeaseJson(std::string_view name_space, std::string_view name,
                      const std::map<std::string, std::string>& labels, std::string_view holder,
                      absl::Duration duration, absl::Time now, std::string_view resource_version) {
  std::string out = R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":)";
  base::AppendJsonString(name, out);
  out += R"(,"namespace":)";
  base::AppendJsonString(name_space, out);
  if (!resource_version.empty()) {
    out += R"(,"resourceVersion":)";
    base::AppendJsonString(resource_version, out);
  }
  out += R"(,"labels":{)";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += first ? "" : ",";
    first = false;
    base::AppendJsonString(k, out);
    out += ":";
    base::AppendJsonString(v, out);
  }
  out += R"(}},"spec":{"holderIdentity":)";
  base::AppendJsonString(holder, out);
  absl::StrAppend(&out, R"(,"leaseDurationSeconds":)", absl::ToInt64Seconds(duration),
                  R"(,"renewTime":")", MicroTime(now), "\"}}");
  return out;
}

}  // namespace sluice::tunnel::wire
