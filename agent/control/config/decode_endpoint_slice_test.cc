// SPDX-License-Identifier: Apache-2.0
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "agent/control/config/decode.h"
#include "agent/control/config/decode_test_util.h"

namespace sluice::config {
namespace {

using testing::ErrorOf;
using testing::Ip;
using testing::OneError;
using testing::OneSlice;

constexpr char kFullSliceJson[] = R"({
  "apiVersion": "discovery.k8s.io/v1",
  "kind": "EndpointSlice",
  "metadata": {
    "name": "web-abc", "namespace": "shop", "uid": "u-2", "resourceVersion": "7",
    "labels": {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "x"},
    "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2024-01-01T00:00:00Z"}
  },
  "addressType": "IPv4",
  "endpoints": [
    {"addresses": ["10.1.0.1", "10.1.0.2"],
     "conditions": {"ready": true, "serving": false, "terminating": true},
     "hostname": "pod-a", "nodeName": "node-1", "zone": "zone-a",
     "hints": {"forZones": [{"name": "zone-a"}, {"name": "zone-b"}]},
     "targetRef": {"kind": "Pod", "name": "pod-a"}},
    {"addresses": ["10.1.0.3"], "conditions": {"ready": null, "serving": null, "terminating": null}},
    {"addresses": ["10.1.0.4"], "conditions": {}, "hints": {"forZones": []}},
    {"addresses": ["10.1.0.5"], "conditions": {"ready": false}, "hints": {}}
  ],
  "ports": [
    {"name": "http", "protocol": "TCP", "port": 8080, "appProtocol": "http"},
    {"name": "dns", "protocol": "UDP", "port": 53},
    {"name": "any", "port": null},
    {}
  ]
})";

constexpr char kFullSliceYaml[] = R"(
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  uid: u-2
  resourceVersion: "7"
  labels:
    kubernetes.io/service-name: web
    endpointslice.kubernetes.io/managed-by: x
  annotations:
    endpoints.kubernetes.io/last-change-trigger-time: "2024-01-01T00:00:00Z"
addressType: IPv4
endpoints:
- addresses: [10.1.0.1, 10.1.0.2]
  conditions: {ready: true, serving: false, terminating: true}
  hostname: pod-a
  nodeName: node-1
  zone: zone-a
  hints:
    forZones:
    - name: zone-a
    - name: zone-b
  targetRef: {kind: Pod, name: pod-a}
- addresses: [10.1.0.3]
  conditions:
    ready: null
    serving: ~
    terminating:
- addresses: [10.1.0.4]
  conditions: {}
  hints: {forZones: []}
- addresses: [10.1.0.5]
  conditions: {ready: FALSE}
  hints: {}
ports:
- name: http
  protocol: TCP
  port: 8080
  appProtocol: http
- {name: dns, protocol: UDP, port: 53}
- name: any
  port:
- {}
)";

EndpointSlice FullSlice() {
  EndpointSlice s;
  s.meta.id = {"shop", "web-abc"};
  s.meta.uid = "u-2";
  s.meta.resource_version = "7";
  s.meta.labels = {{"kubernetes.io/service-name", "web"},
                   {"endpointslice.kubernetes.io/managed-by", "x"}};
  s.meta.annotations = {{std::string(kLastChangeTriggerTimeAnnotation), "2024-01-01T00:00:00Z"}};
  s.address_type = AddressType::kIPv4;
  s.service_name = "web";
  Endpoint a;
  a.addresses = {Ip("10.1.0.1"), Ip("10.1.0.2")};
  a.conditions = {true, false, true};
  a.hostname = "pod-a";
  a.node_name = "node-1";
  a.zone = "zone-a";
  a.has_hints = true;
  a.hint_zones = {"zone-a", "zone-b"};
  Endpoint b;
  b.addresses = {Ip("10.1.0.3")};
  Endpoint c;
  c.addresses = {Ip("10.1.0.4")};
  Endpoint d;
  d.addresses = {Ip("10.1.0.5")};
  d.conditions.ready = false;
  s.endpoints = {a, b, c, d};
  s.ports = {{"http", Protocol::kTcp, 8080, "http"},
             {"dns", Protocol::kUdp, 53, ""},
             {"any", Protocol::kTcp, std::nullopt, ""},
             {"", Protocol::kTcp, std::nullopt, ""}};
  return s;
}

TEST(DecodeEndpointSliceTest, EveryFieldFromJson) {
  EndpointSlice s = OneSlice(kFullSliceJson);
  EXPECT_EQ(s.meta, FullSlice().meta);
  EXPECT_EQ(s.service_name, "web");
  ASSERT_EQ(s.endpoints.size(), 4u);
  EXPECT_EQ(s.endpoints[0], FullSlice().endpoints[0]);
  EXPECT_EQ(s.ports, FullSlice().ports);
  EXPECT_TRUE(s == FullSlice());
}

TEST(DecodeEndpointSliceTest, EveryFieldFromYaml) {
  EndpointSlice s = OneSlice(kFullSliceYaml);
  EXPECT_EQ(s.meta, FullSlice().meta);
  EXPECT_EQ(s.endpoints, FullSlice().endpoints);
  EXPECT_EQ(s.ports, FullSlice().ports);
  EXPECT_TRUE(s == FullSlice());
}

TEST(DecodeEndpointSliceTest, NullConditionsAreUnsetAndReadAsReady) {
  EndpointSlice s = OneSlice(kFullSliceJson);
  const EndpointConditions& c = s.endpoints[1].conditions;
  EXPECT_EQ(c.ready, std::nullopt);
  EXPECT_EQ(c.serving, std::nullopt);
  EXPECT_EQ(c.terminating, std::nullopt);
  EXPECT_TRUE(c.IsReady());
  EXPECT_TRUE(c.IsServing());
  EXPECT_FALSE(c.IsTerminating());
  EXPECT_EQ(s.endpoints[0].conditions.serving, false);
  EXPECT_EQ(s.endpoints[0].conditions.terminating, true);
}

TEST(DecodeEndpointSliceTest, EmptyForZonesIsNoHints) {
  EndpointSlice s = OneSlice(kFullSliceJson);
  EXPECT_FALSE(s.endpoints[2].has_hints);
  EXPECT_FALSE(s.endpoints[3].has_hints);
  EXPECT_TRUE(s.endpoints[0].has_hints);
}

TEST(DecodeEndpointSliceTest, Ipv6AndFqdn) {
  EndpointSlice v6 = OneSlice(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
      "metadata":{"name":"s"},"addressType":"IPv6","endpoints":[{"addresses":["fd00::1"]}]})");
  EXPECT_EQ(v6.address_type, AddressType::kIPv6);
  EXPECT_EQ(v6.endpoints[0].addresses, std::vector<net::IpAddress>{Ip("fd00::1")});
  EXPECT_EQ(v6.service_name, "");
  EndpointSlice fqdn = OneSlice(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
      "metadata":{"name":"s"},"addressType":"FQDN",
      "endpoints":[{"addresses":["db.example.com"],"conditions":{"ready":true}}]})");
  EXPECT_EQ(fqdn.address_type, AddressType::kFqdn);
  ASSERT_EQ(fqdn.endpoints.size(), 1u);
  EXPECT_TRUE(fqdn.endpoints[0].addresses.empty());
  EXPECT_EQ(fqdn.endpoints[0].conditions.ready, true);
}

TEST(DecodeEndpointSliceTest, NoEndpoints) {
  EndpointSlice s = OneSlice(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
      "metadata":{"name":"s"},"addressType":"IPv4","endpoints":null,"ports":null})");
  EXPECT_TRUE(s.endpoints.empty());
  EXPECT_TRUE(s.ports.empty());
}

struct SliceCase {
  const char* address_type;
  const char* body;
  const char* error;
};

class EndpointSliceErrorTest : public ::testing::TestWithParam<SliceCase> {};

TEST_P(EndpointSliceErrorTest, NamesPathAndReason) {
  std::string json =
      absl::StrCat(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",)",
                   R"("metadata":{"name":"web-1","namespace":"shop"},"addressType":")",
                   GetParam().address_type, "\",", GetParam().body, "}");
  DecodeError e = OneError(json);
  EXPECT_EQ(e.kind, "EndpointSlice");
  EXPECT_EQ(e.id, (NamespacedName{"shop", "web-1"}));
  EXPECT_EQ(absl::StrCat(e.path, ": ", e.message), GetParam().error);
}

std::string ManyAddresses(int n) {
  std::vector<std::string> ips;
  ips.reserve(n);
  for (int i = 0; i < n; ++i) {
    ips.push_back(absl::StrCat("\"10.0.", i / 250, ".", i % 250 + 1, "\""));
  }
  return absl::StrCat(R"("endpoints":[{"addresses":[)", absl::StrJoin(ips, ","), "]}]");
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, EndpointSliceErrorTest,
    ::testing::Values(
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["fd00::1"]}])",
                  R"(endpoints[0].addresses[0]: must be an IPv4 address (addressType), got )"
                  R"("fd00::1")"},
        SliceCase{"IPv6", R"("endpoints":[{"addresses":["fd00::1"]},{"addresses":["10.0.0.1"]}])",
                  R"(endpoints[1].addresses[0]: must be an IPv6 address (addressType), got )"
                  R"("10.0.0.1")"},
        // IPv4-mapped IPv6 is IPv4 to the API server's validation (Go's To4() != nil).
        SliceCase{"IPv6", R"("endpoints":[{"addresses":["::ffff:10.0.0.1"]}])",
                  R"(endpoints[0].addresses[0]: must be an IPv6 address (addressType), got )"
                  R"("::ffff:10.0.0.1")"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1","300.1.1.1"]}])",
                  R"(endpoints[0].addresses[1]: must be an IPv4 address (addressType), got )"
                  R"("300.1.1.1")"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":[]}])",
                  "endpoints[0].addresses: must hold 1 to 100 addresses, got 0"},
        SliceCase{"IPv4", R"("endpoints":[{"conditions":{}}])", "endpoints[0].addresses: required"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":[1]}])",
                  "endpoints[0].addresses[0]: expected string, got integer"},
        SliceCase{"FQDN", R"("endpoints":[{"addresses":[true]}])",
                  "endpoints[0].addresses[0]: expected string, got boolean"},
        SliceCase{"IPv4",
                  R"("endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":"true"}}])",
                  "endpoints[0].conditions.ready: expected boolean, got string"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"conditions":{"serving":1}}])",
                  "endpoints[0].conditions.serving: expected boolean, got integer"},
        SliceCase{"IPv4",
                  R"("endpoints":[{"addresses":["10.0.0.1"],"conditions":{"terminating":"no"}}])",
                  "endpoints[0].conditions.terminating: expected boolean, got string"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"conditions":[]}])",
                  "endpoints[0].conditions: expected object, got array"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"nodeName":1}])",
                  "endpoints[0].nodeName: expected string, got integer"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"hostname":{}}])",
                  "endpoints[0].hostname: expected string, got object"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"zone":false}])",
                  "endpoints[0].zone: expected string, got boolean"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"hints":{"forZones":[{}]}}])",
                  "endpoints[0].hints.forZones[0].name: required"},
        SliceCase{"IPv4",
                  R"("endpoints":[{"addresses":["10.0.0.1"],"hints":{"forZones":[{"name":2}]}}])",
                  "endpoints[0].hints.forZones[0].name: expected string, got integer"},
        SliceCase{"IPv4", R"("endpoints":[{"addresses":["10.0.0.1"],"hints":{"forZones":{}}}])",
                  "endpoints[0].hints.forZones: expected array, got object"},
        SliceCase{"IPv4", R"("endpoints":{})", "endpoints: expected array, got object"},
        SliceCase{"IPv4", R"("endpoints":["10.0.0.1"])",
                  "endpoints[0]: expected object, got string"},
        SliceCase{"IPv4", R"("ports":[{"port":0}])",
                  "ports[0].port: must be between 1 and 65535, got 0"},
        SliceCase{"IPv4", R"("ports":[{"port":70000}])",
                  "ports[0].port: must be between 1 and 65535, got 70000"},
        SliceCase{"IPv4", R"("ports":[{"port":"80"}])",
                  "ports[0].port: expected integer, got string"},
        SliceCase{"IPv4", R"("ports":[{"port":80,"protocol":"tcp"}])",
                  R"(ports[0].protocol: must be one of "TCP", "UDP", "SCTP"; got "tcp")"},
        SliceCase{"IPv4", R"("ports":[{"name":false}])",
                  "ports[0].name: expected string, got boolean"},
        SliceCase{"IPv4", R"("ports":[{"appProtocol":1}])",
                  "ports[0].appProtocol: expected string, got integer"},
        SliceCase{"IPv4", R"("ports":{})", "ports: expected array, got object"},
        SliceCase{"IPv5", R"("ports":[])",
                  R"(addressType: must be one of "IPv4", "IPv6", "FQDN"; got "IPv5")"},
        SliceCase{"", R"("ports":[])",
                  R"(addressType: must be one of "IPv4", "IPv6", "FQDN"; got "")"}));

TEST(DecodeEndpointSliceTest, AddressCountLimit) {
  const std::string head = R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",)"
                           R"("metadata":{"name":"s"},"addressType":"IPv4",)";
  EXPECT_EQ(OneSlice(head + ManyAddresses(100) + "}").endpoints[0].addresses.size(), 100u);
  EXPECT_EQ(ErrorOf(head + ManyAddresses(101) + "}"),
            "endpoints[0].addresses: must hold 1 to 100 addresses, got 101");
}

TEST(DecodeEndpointSliceTest, AddressTypeRequiredAndApiVersionChecked) {
  EXPECT_EQ(ErrorOf(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
                        "metadata":{"name":"s"}})"),
            "addressType: required");
  EXPECT_EQ(ErrorOf(R"({"apiVersion":"discovery.k8s.io/v1beta1","kind":"EndpointSlice",
                        "metadata":{"name":"s"},"addressType":"IPv4"})"),
            R"(apiVersion: must be "discovery.k8s.io/v1", got "discovery.k8s.io/v1beta1")");
  EXPECT_EQ(ErrorOf(R"({"apiVersion":"v1","kind":"EndpointSlice",
                        "metadata":{"name":"s"},"addressType":"IPv4"})"),
            R"(apiVersion: must be "discovery.k8s.io/v1", got "v1")");
}

TEST(DecodeEndpointSliceTest, YamlIpv6InIpv4Slice) {
  DecodeError e = OneError(R"(
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: shop}
addressType: IPv4
endpoints:
- addresses: ["10.0.0.1"]
- addresses: ["2001:db8::5"]
)");
  EXPECT_EQ(e.ToString(),
            "EndpointSlice shop/web-1: endpoints[1].addresses[0]: must be an IPv4 address "
            "(addressType), got \"2001:db8::5\"");
}

TEST(DecodeEndpointSliceTest, YamlOneOneSpellingsOfBooleansAreStrings) {
  // YAML 1.2 core schema: `yes` is a string (go-yaml v2 would read true).
  EXPECT_EQ(ErrorOf("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\n"
                    "addressType: IPv4\nendpoints:\n- addresses: [10.0.0.1]\n"
                    "  conditions: {ready: yes}\n"),
            "endpoints[0].conditions.ready: expected boolean, got string");
}

}  // namespace
}  // namespace sluice::config
