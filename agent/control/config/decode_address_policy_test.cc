// SPDX-License-Identifier: Apache-2.0
// Special addresses (unspecified, loopback, link-local, multicast) in the four address fields,
// under the file/etcd policy and the kube source's (AddressPolicy).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "simdjson.h"

#include "agent/control/config/decode.h"
#include "agent/control/config/decode_test_util.h"

namespace sluice::config {
namespace {

using testing::Decode;
using testing::Ip;

constexpr AddressPolicy kFile{};  // also the etcd source's
constexpr AddressPolicy kKube{.api_validated = true};
constexpr AddressPolicy kFileLoopback{.allow_loopback = true};

std::string ServiceWith(const std::string& spec, const std::string& status = "{}") {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},)",
                      R"("spec":)", spec, R"(,"status":)", status, "}");
}

// A slice whose one endpoint has a plain address of the type's family, then `address`.
std::string SliceWith(const std::string& type, const std::string& address) {
  const char* plain = type == "IPv4" ? "10.1.0.1" : type == "IPv6" ? "fd00::1" : "a.example";
  return absl::StrCat(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",)",
                      R"("metadata":{"name":"web-1"},"addressType":")", type,
                      R"(","endpoints":[{"addresses":[")", plain, R"(",")", address, R"("]}]})");
}

// "<object>: <path>: <message>" of the one error, or "ok" when `text` decoded cleanly.
std::string Verdict(const std::string& text, const AddressPolicy& policy) {
  Manifest m = Decode(text, Format::kAuto, policy);
  if (m.errors.empty()) {
    EXPECT_EQ(m.services.size() + m.endpoint_slices.size(), 1u);
    return "ok";
  }
  EXPECT_EQ(m.errors.size(), 1u);
  return m.errors[0].ToString();
}

constexpr char kUnspecified[] = "may not be unspecified";
constexpr char kLoopback[] = "may not be in the loopback range (127.0.0.0/8, ::1/128)";
constexpr char kLinkLocal[] = "may not be in the link-local range (169.254.0.0/16, fe80::/10)";
constexpr char kLinkLocalMulticast[] =
    "may not be in the link-local multicast range (224.0.0.0/24, ff02::/16)";
constexpr char kMulticast[] = "may not be multicast (224.0.0.0/4, ff00::/8)";

// The verdict on a Service whose one externalIP is `ip`, and the refusal to expect.
std::string ExternalIp(const std::string& ip, const AddressPolicy& policy) {
  return Verdict(ServiceWith(absl::StrCat(R"({"externalIPs":[")", ip, R"("]})")), policy);
}
std::string Refused(const std::string& ip, const char* why) {
  return absl::StrCat("Service default/web: spec.externalIPs[0]: ", why, ", got \"", ip, "\"");
}

TEST(DecodeAddressPolicyTest, ExternalIpsFollowTheApiServerEverywhere) {
  // ValidateNonSpecialIP's four ranges, refused whichever source the Service came from.
  const std::vector<std::pair<std::string, const char*>> refused = {
      {"0.0.0.0", kUnspecified},
      {"::", kUnspecified},
      {"127.0.0.1", kLoopback},
      {"::ffff:127.0.0.9", kLoopback},
      {"::1", kLoopback},
      {"169.254.169.254", kLinkLocal},
      {"fe80::1", kLinkLocal},
      {"224.0.0.251", kLinkLocalMulticast},
      {"ff02::1", kLinkLocalMulticast},
  };
  for (const AddressPolicy& policy : {kFile, kKube}) {
    for (const auto& [ip, why] : refused) {
      EXPECT_EQ(ExternalIp(ip, policy), Refused(ip, why));
    }
    EXPECT_EQ(Verdict(ServiceWith(R"({"externalIPs":["192.0.2.1","2001:db8::1"]})"), policy), "ok");
  }
  EXPECT_EQ(Verdict(ServiceWith(R"({"externalIPs":["192.0.2.1","0.0.0.0"]})"), kFile),
            R"(Service default/web: spec.externalIPs[1]: may not be unspecified, got "0.0.0.0")");
  // Other multicast passes the API server, so the kube source keeps it; files and etcd do not.
  for (const std::string ip : {"239.1.2.3", "ff05::2"}) {
    EXPECT_EQ(ExternalIp(ip, kKube), "ok");
    EXPECT_EQ(ExternalIp(ip, kFile), Refused(ip, kMulticast));
  }
}

TEST(DecodeAddressPolicyTest, ClusterIpsAndIngressAreCheckedWithoutAnApiServer) {
  EXPECT_EQ(Verdict(ServiceWith(R"({"clusterIP":"0.0.0.0"})"), kFile),
            R"(Service default/web: spec.clusterIP: may not be unspecified, got "0.0.0.0")");
  EXPECT_EQ(Verdict(ServiceWith(R"({"clusterIPs":["10.0.0.1","::1"]})"), kFile),
            "Service default/web: spec.clusterIPs[1]: may not be in the loopback range "
            R"((127.0.0.0/8, ::1/128), got "::1")");
  EXPECT_EQ(
      Verdict(ServiceWith("{}", R"({"loadBalancer":{"ingress":[{"ip":"169.254.1.1"}]}})"), kFile),
      "Service default/web: status.loadBalancer.ingress[0].ip: may not be in the "
      R"(link-local range (169.254.0.0/16, fe80::/10), got "169.254.1.1")");
  // The kube source: the allocator keeps clusterIPs in the service CIDR, and the API server
  // only checks that an ingress IP parses (ValidateLoadBalancerStatus), so nothing is refused.
  EXPECT_EQ(Verdict(ServiceWith(R"({"clusterIP":"127.0.0.1"})",
                                R"({"loadBalancer":{"ingress":[{"ip":"127.0.0.1"}]}})"),
                    kKube),
            "ok");
  EXPECT_EQ(Verdict(ServiceWith(R"({"clusterIP":"10.0.0.1"})",
                                R"({"loadBalancer":{"ingress":[{"ip":"203.0.113.7"}]}})"),
                    kFile),
            "ok");
  // --allow-loopback opens loopback cluster IPs (the bench's loopback topology), nothing else.
  EXPECT_EQ(Verdict(ServiceWith(R"({"clusterIP":"127.0.0.1"})"), kFileLoopback), "ok");
  EXPECT_NE(Verdict(ServiceWith(R"({"clusterIP":"0.0.0.0"})"), kFileLoopback), "ok");
  EXPECT_NE(Verdict(ServiceWith(R"({"externalIPs":["127.0.0.1"]})"), kFileLoopback), "ok");
}

TEST(DecodeAddressPolicyTest, EndpointAddresses) {
  for (const AddressPolicy& policy : {kFile, kKube, kFileLoopback}) {
    EXPECT_EQ(Verdict(SliceWith("IPv4", "169.254.169.254"), policy),
              "EndpointSlice default/web-1: endpoints[0].addresses[1]: may not be in the "
              R"(link-local range (169.254.0.0/16, fe80::/10), got "169.254.169.254")");
    EXPECT_EQ(Verdict(SliceWith("IPv4", "0.0.0.0"), policy),
              "EndpointSlice default/web-1: endpoints[0].addresses[1]: may not be unspecified, "
              R"(got "0.0.0.0")");
    EXPECT_EQ(Verdict(SliceWith("IPv6", "ff02::1"), policy),
              "EndpointSlice default/web-1: endpoints[0].addresses[1]: may not be in the "
              R"(link-local multicast range (224.0.0.0/24, ff02::/16), got "ff02::1")");
  }
  EXPECT_EQ(Verdict(SliceWith("IPv4", "127.0.0.2"), kFile),
            "EndpointSlice default/web-1: endpoints[0].addresses[1]: may not be in the "
            R"(loopback range (127.0.0.0/8, ::1/128), got "127.0.0.2")");
  EXPECT_NE(Verdict(SliceWith("IPv6", "::1"), kKube), "ok");
  // --allow-loopback: loopback only, nothing else opens up.
  Manifest m = Decode(SliceWith("IPv4", "127.0.0.2"), Format::kAuto, kFileLoopback);
  ASSERT_EQ(m.endpoint_slices.size(), 1u);
  EXPECT_EQ(m.endpoint_slices[0]->endpoints[0].addresses,
            (std::vector<net::IpAddress>{Ip("10.1.0.1"), Ip("127.0.0.2")}));
  EXPECT_EQ(Verdict(SliceWith("IPv6", "::1"), {.api_validated = true, .allow_loopback = true}),
            "ok");
  EXPECT_EQ(Verdict(SliceWith("IPv4", "239.0.0.1"), kKube), "ok");
  EXPECT_NE(Verdict(SliceWith("IPv4", "239.0.0.1"), kFileLoopback), "ok");
  // FQDN endpoints carry names, not addresses.
  EXPECT_EQ(Verdict(SliceWith("FQDN", "localhost"), kFile), "ok");
}

TEST(DecodeAddressPolicyTest, DecodeServiceUsesThePolicyToo) {
  simdjson::dom::parser parser;
  simdjson::dom::element object;
  ASSERT_EQ(parser.parse(ServiceWith(R"({"clusterIP":"127.0.0.1"})")).get(object),
            simdjson::SUCCESS);
  EXPECT_TRUE(DecodeService(object, kKube).ok());
  absl::StatusOr<ServicePtr> refused = DecodeService(object, kFile);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "Service default/web: spec.clusterIP: may not be in the loopback range "
            R"((127.0.0.0/8, ::1/128), got "127.0.0.1")");
}

}  // namespace
}  // namespace sluice::config
