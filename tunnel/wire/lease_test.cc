// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/lease.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::wire {
namespace {

Lease Parse(const std::string& json) {
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  EXPECT_EQ(parser.parse(json).get(e), simdjson::SUCCESS) << json;
  auto lease = ParseLease(e);
  EXPECT_TRUE(lease.ok()) << lease.status();
  return lease.ok() ? *lease : Lease{};
}

TEST(LeaseTest, ValidUntilRenewTimePlusDuration) {
  const Lease l =
      Parse(R"({"metadata":{"name":"konnectivity-proxy-server-a","resourceVersion":"7"},)"
            R"("spec":{"holderIdentity":"a","leaseDurationSeconds":30,)"
            R"("renewTime":"2026-01-02T03:04:05.123456Z"}})");
  EXPECT_EQ(l.name, "konnectivity-proxy-server-a");
  EXPECT_EQ(l.resource_version, "7");
  EXPECT_EQ(l.holder, "a");
  const absl::Time renewed = absl::FromUnixMicros(1767323045123456);
  EXPECT_EQ(l.renewed, renewed);
  EXPECT_TRUE(LeaseValid(l, renewed + absl::Seconds(29)));
  EXPECT_FALSE(LeaseValid(l, renewed + absl::Seconds(30)));
}

TEST(LeaseTest, AcquireTimeWhenNotRenewedAndExpiredWithoutTimes) {
  const Lease acquired = Parse(R"({"metadata":{"name":"x"},"spec":{"leaseDurationSeconds":10,)"
                               R"("acquireTime":"2026-01-02T03:04:05Z"}})");
  EXPECT_TRUE(LeaseValid(acquired, absl::FromUnixSeconds(1767323045)));
  const Lease timeless = Parse(R"({"metadata":{"name":"y"},"spec":{"leaseDurationSeconds":10}})");
  EXPECT_FALSE(LeaseValid(timeless, absl::InfinitePast() + absl::Hours(1)));
}

TEST(LeaseTest, LabelsAndSelector) {
  auto labels = ParseLeaseLabels("k8s-app=konnectivity-server, b=2");
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(LeaseSelector(*labels), "b=2,k8s-app=konnectivity-server");
  EXPECT_FALSE(ParseLeaseLabels("novalue").ok());
  EXPECT_FALSE(ParseLeaseLabels("").ok());
}

TEST(LeaseTest, JsonRoundTrips) {
  const absl::Time now = absl::FromUnixMicros(1767323045000001);
  const std::string json =
      LeaseJson("kube-system", "konnectivity-proxy-server-a", {{"k8s-app", "konnectivity-server"}},
                "a", absl::Seconds(30), now, "12");
  const Lease l = Parse(json);
  EXPECT_EQ(l.resource_version, "12");
  EXPECT_EQ(l.renewed, now);
  EXPECT_EQ(l.duration, absl::Seconds(30));
  EXPECT_NE(json.find(R"("labels":{"k8s-app":"konnectivity-server"})"), std::string::npos);
  EXPECT_EQ(MicroTime(now), "2026-01-02T03:04:05.000001Z");
  EXPECT_EQ(LeasesPath("ns", "n"), "/apis/coordination.k8s.io/v1/namespaces/ns/leases/n");
}

}  // namespace
}  // namespace sluice::tunnel::wire
