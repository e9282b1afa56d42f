// SPDX-License-Identifier: Apache-2.0
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

#include "agent/control/config/decode.h"
#include "agent/control/config/decode_test_util.h"

namespace sluice::config {
namespace {

using testing::ErrorOf;
using testing::Ip;
using testing::OneError;
using testing::OneService;

constexpr char kFullServiceJson[] = R"({
  "apiVersion": "v1",
  "kind": "Service",
  "metadata": {
    "name": "web", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
    "labels": {"app": "web", "service.kubernetes.io/service-proxy-name": "sluice"},
    "annotations": {"note": "hello", "empty": null},
    "creationTimestamp": "2024-01-01T00:00:00Z"
  },
  "spec": {
    "type": "LoadBalancer",
    "clusterIP": "10.96.0.10",
    "clusterIPs": ["10.96.0.10", "fd00::10"],
    "ipFamilyPolicy": "PreferDualStack",
    "ports": [
      {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080, "nodePort": 30080,
       "appProtocol": "http"},
      {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": "dns-port"},
      {"name": "sig", "protocol": "SCTP", "port": 9999}
    ],
    "externalIPs": ["192.0.2.1", "2001:db8::1"],
    "loadBalancerSourceRanges": ["10.0.0.0/8", " 192.168.0.0/16 "],
    "externalName": "web.example.com",
    "sessionAffinity": "ClientIP",
    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
    "internalTrafficPolicy": "Local",
    "externalTrafficPolicy": "Local",
    "healthCheckNodePort": 32000,
    "someFutureField": {"nested": [1, {"x": null}]}
  },
  "status": {"loadBalancer": {"ingress": [
    {"ip": "203.0.113.7"}, {"hostname": "lb.example.com"}, {"ip": "2001:db8::7", "ipMode": "VIP"}
  ]}}
})";

constexpr char kFullServiceYaml[] = R"(
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  uid: u-1
  resourceVersion: "42"
  labels:
    app: web
    service.kubernetes.io/service-proxy-name: sluice
  annotations:
    note: hello
    empty:
  creationTimestamp: 2024-01-01T00:00:00Z
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.10
  clusterIPs:
  - 10.96.0.10
  - fd00::10
  ipFamilyPolicy: PreferDualStack
  ports:
  - name: http
    protocol: TCP
    port: 80
    targetPort: 8080
    nodePort: 30080
    appProtocol: http
  - {name: dns, protocol: UDP, port: 53, targetPort: dns-port}
  - name: sig
    protocol: SCTP
    port: 9999
  externalIPs: [192.0.2.1, "2001:db8::1"]
  loadBalancerSourceRanges: [10.0.0.0/8, " 192.168.0.0/16 "]
  externalName: web.example.com
  sessionAffinity: ClientIP
  sessionAffinityConfig:
    clientIP:
      timeoutSeconds: 600
  internalTrafficPolicy: Local
  externalTrafficPolicy: Local
  healthCheckNodePort: 32000
  someFutureField: {nested: [1, {x: ~}]}
status:
  loadBalancer:
    ingress:
    - ip: 203.0.113.7
    - hostname: lb.example.com
    - ip: 2001:db8::7
      ipMode: VIP
)";

Service FullService() {
  Service s;
  s.meta.id = {"shop", "web"};
  s.meta.uid = "u-1";
  s.meta.resource_version = "42";
  s.meta.labels = {{"app", "web"}, {"service.kubernetes.io/service-proxy-name", "sluice"}};
  s.meta.annotations = {{"note", "hello"}, {"empty", ""}};
  s.type = ServiceType::kLoadBalancer;
  s.cluster_ips = {Ip("10.96.0.10"), Ip("fd00::10")};
  s.ports = {
      {"http", Protocol::kTcp, 80, {8080, ""}, 30080, "http"},
      {"dns", Protocol::kUdp, 53, {0, "dns-port"}, 0, ""},
      {"sig", Protocol::kSctp, 9999, {}, 0, ""},
  };
  s.external_ips = {Ip("192.0.2.1"), Ip("2001:db8::1")};
  s.load_balancer_ingress = {Ip("203.0.113.7"), Ip("2001:db8::7")};
  s.load_balancer_source_ranges = {"10.0.0.0/8", "192.168.0.0/16"};
  s.external_name = "web.example.com";
  s.session_affinity = SessionAffinity::kClientIP;
  s.affinity_timeout_seconds = 600;
  s.internal_traffic_policy = TrafficPolicy::kLocal;
  s.external_traffic_policy = TrafficPolicy::kLocal;
  s.health_check_node_port = 32000;
  return s;
}

TEST(DecodeServiceTest, EveryFieldFromJson) {
  Service s = OneService(kFullServiceJson);
  EXPECT_EQ(s.meta, FullService().meta);
  EXPECT_EQ(s.ports, FullService().ports);
  EXPECT_EQ(s.cluster_ips, FullService().cluster_ips);
  EXPECT_EQ(s.load_balancer_ingress, FullService().load_balancer_ingress);
  EXPECT_EQ(s.load_balancer_source_ranges, FullService().load_balancer_source_ranges);
  EXPECT_FALSE(s.headless);
  EXPECT_TRUE(s == FullService());
}

TEST(DecodeServiceTest, EveryFieldFromYaml) {
  Service s = OneService(kFullServiceYaml);
  EXPECT_EQ(s.meta, FullService().meta);
  EXPECT_EQ(s.ports, FullService().ports);
  EXPECT_EQ(s.external_ips, FullService().external_ips);
  EXPECT_TRUE(s == FullService());
}

TEST(DecodeServiceTest, Defaults) {
  Service s = OneService(
      "apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
      "spec: {ports: [{port: 80}]}\n");
  EXPECT_EQ(s.meta.id, (NamespacedName{"default", "web"}));
  EXPECT_EQ(s.type, ServiceType::kClusterIP);
  EXPECT_FALSE(s.headless);
  EXPECT_TRUE(s.cluster_ips.empty());
  ASSERT_EQ(s.ports.size(), 1u);
  EXPECT_EQ(s.ports[0], (ServicePort{"", Protocol::kTcp, 80, {}, 0, ""}));
  EXPECT_EQ(s.session_affinity, SessionAffinity::kNone);
  EXPECT_EQ(s.affinity_timeout_seconds, 10800);
  EXPECT_EQ(s.internal_traffic_policy, TrafficPolicy::kCluster);
  EXPECT_EQ(s.external_traffic_policy, TrafficPolicy::kCluster);
  EXPECT_EQ(s.health_check_node_port, 0);
}

TEST(DecodeServiceTest, NoSpecAndEmptyEnumsReadAsDefaults) {
  EXPECT_TRUE(OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}})") ==
              (Service{.meta = {.id = {"default", "a"}}}));
  Service s = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a",
      "namespace":""},"spec":{"type":"","sessionAffinity":"","externalTrafficPolicy":"",
      "clusterIP":"","ports":[{"port":1,"protocol":""}]}})");
  EXPECT_EQ(s.meta.id.ns, "default");
  EXPECT_EQ(s.type, ServiceType::kClusterIP);
  EXPECT_EQ(s.ports[0].protocol, Protocol::kTcp);
  EXPECT_TRUE(s.cluster_ips.empty());
}

TEST(DecodeServiceTest, Headless) {
  Service a = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},
      "spec":{"clusterIP":"None"}})");
  EXPECT_TRUE(a.headless);
  EXPECT_TRUE(a.cluster_ips.empty());
  Service b = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},
      "spec":{"clusterIP":"None","clusterIPs":["None"]}})");
  EXPECT_TRUE(b.headless);
  EXPECT_TRUE(b.cluster_ips.empty());
}

TEST(DecodeServiceTest, ClusterIpAloneOrListAlone) {
  Service a = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},
      "spec":{"clusterIP":"fd00::1"}})");
  EXPECT_EQ(a.cluster_ips, std::vector<net::IpAddress>{Ip("fd00::1")});
  Service b = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},
      "spec":{"clusterIPs":["fd00::1","10.0.0.1"]}})");
  EXPECT_EQ(b.cluster_ips, (std::vector<net::IpAddress>{Ip("fd00::1"), Ip("10.0.0.1")}));
}

TEST(DecodeServiceTest, SamePortDifferentProtocolsIsFine) {
  Service s = OneService(R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"dns"},
      "spec":{"ports":[{"name":"t","port":53},{"name":"u","port":53,"protocol":"UDP"}]}})");
  EXPECT_EQ(s.ports.size(), 2u);
}

// Each row: a spec fragment, and the error's "<path>: <message>".
struct SpecCase {
  const char* spec;
  const char* error;
};

class ServiceSpecErrorTest : public ::testing::TestWithParam<SpecCase> {};

TEST_P(ServiceSpecErrorTest, NamesPathAndReason) {
  std::string json = absl::StrCat(
      R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},)",
      GetParam().spec, "}");
  DecodeError e = OneError(json);
  EXPECT_EQ(e.kind, "Service");
  EXPECT_EQ(e.id, (NamespacedName{"shop", "web"}));
  EXPECT_EQ(absl::StrCat(e.path, ": ", e.message), GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Malformed, ServiceSpecErrorTest,
    ::testing::Values(
        SpecCase{R"("spec":{"ports":[{"port":0}]})",
                 "spec.ports[0].port: must be between 1 and 65535, got 0"},
        SpecCase{R"("spec":{"ports":[{"port":70000}]})",
                 "spec.ports[0].port: must be between 1 and 65535, got 70000"},
        SpecCase{R"("spec":{"ports":[{"port":-1}]})",
                 "spec.ports[0].port: must be between 1 and 65535, got -1"},
        SpecCase{R"("spec":{"ports":[{"port":18446744073709551615}]})",
                 "spec.ports[0].port: must be between 1 and 65535, got 18446744073709551615"},
        SpecCase{R"("spec":{"ports":[{"port":"80"}]})",
                 "spec.ports[0].port: expected integer, got string"},
        SpecCase{R"("spec":{"ports":[{"port":80.0}]})",
                 "spec.ports[0].port: expected integer, got float"},
        SpecCase{R"("spec":{"ports":[{"name":"x"}]})", "spec.ports[0].port: required"},
        SpecCase{R"("spec":{"ports":[{"port":null}]})", "spec.ports[0].port: required"},
        SpecCase{R"("spec":{"ports":[{"port":80,"targetPort":0}]})",
                 "spec.ports[0].targetPort: must be between 1 and 65535, got 0"},
        SpecCase{R"("spec":{"ports":[{"port":80,"targetPort":""}]})",
                 "spec.ports[0].targetPort: must be a port number or a non-empty port name"},
        SpecCase{R"("spec":{"ports":[{"port":80,"targetPort":true}]})",
                 "spec.ports[0].targetPort: expected integer or string, got boolean"},
        SpecCase{R"("spec":{"ports":[{"port":80,"nodePort":65536}]})",
                 "spec.ports[0].nodePort: must be between 0 and 65535, got 65536"},
        SpecCase{R"("spec":{"ports":[{"port":80,"protocol":"HTTP"}]})",
                 R"(spec.ports[0].protocol: must be one of "TCP", "UDP", "SCTP"; got "HTTP")"},
        SpecCase{R"("spec":{"ports":[{"port":80,"protocol":6}]})",
                 "spec.ports[0].protocol: expected string, got integer"},
        SpecCase{R"("spec":{"ports":[{"port":80,"name":7}]})",
                 "spec.ports[0].name: expected string, got integer"},
        SpecCase{R"("spec":{"ports":[{"port":80,"appProtocol":[]}]})",
                 "spec.ports[0].appProtocol: expected string, got array"},
        SpecCase{R"("spec":{"ports":[{"port":80},{"name":"b","port":81}]})",
                 "spec.ports[0].name: required when the service has more than one port"},
        SpecCase{R"("spec":{"ports":[{"name":"a","port":80},{"name":"a","port":81}]})",
                 R"(spec.ports[1].name: duplicate name "a")"},
        SpecCase{R"("spec":{"ports":[{"name":"a","port":80},{"name":"b","port":80}]})",
                 "spec.ports[1]: duplicate port 80/TCP"},
        SpecCase{R"("spec":{"ports":{"port":80}})", "spec.ports: expected array, got object"},
        SpecCase{R"("spec":{"ports":[80]})", "spec.ports[0]: expected object, got integer"},
        SpecCase{R"("spec":{"type":"Foo"})",
                 R"(spec.type: must be one of "ClusterIP", "NodePort", "LoadBalancer", )"
                 R"("ExternalName"; got "Foo")"},
        SpecCase{R"("spec":{"clusterIP":"10.0.0.300"})",
                 R"(spec.clusterIP: must be a valid IP address, got "10.0.0.300")"},
        SpecCase{R"("spec":{"clusterIP":10})", "spec.clusterIP: expected string, got integer"},
        SpecCase{R"("spec":{"clusterIPs":["10.0.0.1","10.0.0.2"]})",
                 "spec.clusterIPs[1]: a second cluster IP must be of the other IP family "
                 "(dual-stack)"},
        SpecCase{R"("spec":{"clusterIPs":["10.0.0.1","fd00::1","10.0.0.2"]})",
                 "spec.clusterIPs[2]: at most 2 cluster IPs (one per IP family) are allowed"},
        SpecCase{R"("spec":{"clusterIP":"10.0.0.1","clusterIPs":["10.0.0.2"]})",
                 R"(spec.clusterIPs[0]: must equal spec.clusterIP "10.0.0.1", got "10.0.0.2")"},
        SpecCase{R"("spec":{"clusterIPs":["None","10.0.0.1"]})",
                 R"(spec.clusterIPs[1]: "None" (headless) must be the only cluster IP)"},
        SpecCase{R"("spec":{"clusterIPs":["10.0.0.1","None"]})",
                 R"(spec.clusterIPs[1]: "None" (headless) must be the only cluster IP)"},
        SpecCase{R"("spec":{"clusterIPs":"10.0.0.1"})",
                 "spec.clusterIPs: expected array, got string"},
        SpecCase{R"("spec":{"externalIPs":["1.2.3"]})",
                 R"(spec.externalIPs[0]: must be a valid IP address, got "1.2.3")"},
        SpecCase{R"("spec":{"externalIPs":[null]})",
                 "spec.externalIPs[0]: expected string, got null"},
        SpecCase{R"("spec":{"loadBalancerSourceRanges":["10.0.0.0/33"]})",
                 "spec.loadBalancerSourceRanges[0]: must be a CIDR such as 10.0.0.0/8, got "
                 "\"10.0.0.0/33\""},
        SpecCase{R"("spec":{"externalName":5})", "spec.externalName: expected string, got integer"},
        SpecCase{R"("spec":{"sessionAffinity":"Sticky"})",
                 R"(spec.sessionAffinity: must be one of "None", "ClientIP"; got "Sticky")"},
        SpecCase{R"("spec":{"sessionAffinityConfig":{"clientIP":{"timeoutSeconds":0}}})",
                 "spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be between 1 and "
                 "86400, got 0"},
        SpecCase{R"("spec":{"sessionAffinityConfig":{"clientIP":{"timeoutSeconds":86401}}})",
                 "spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be between 1 and "
                 "86400, got 86401"},
        SpecCase{R"("spec":{"sessionAffinityConfig":{"clientIP":7}})",
                 "spec.sessionAffinityConfig.clientIP: expected object, got integer"},
        SpecCase{R"("spec":{"internalTrafficPolicy":"local"})",
                 R"(spec.internalTrafficPolicy: must be one of "Cluster", "Local"; got "local")"},
        SpecCase{R"("spec":{"externalTrafficPolicy":"Global"})",
                 R"(spec.externalTrafficPolicy: must be one of "Cluster", "Local"; got "Global")"},
        SpecCase{R"("spec":{"healthCheckNodePort":-1})",
                 "spec.healthCheckNodePort: must be between 0 and 65535, got -1"},
        SpecCase{R"("spec":[])", "spec: expected object, got array"},
        SpecCase{R"("status":{"loadBalancer":{"ingress":[{"ip":"lb"}]}})",
                 R"(status.loadBalancer.ingress[0].ip: must be a valid IP address, got "lb")"},
        SpecCase{R"("status":{"loadBalancer":{"ingress":{}}})",
                 "status.loadBalancer.ingress: expected array, got object"}));

// Rows whose object has no readable identity.
TEST(DecodeServiceTest, MetadataErrors) {
  const std::string head = R"({"apiVersion":"v1","kind":"Service",)";
  EXPECT_EQ(ErrorOf(head + R"("spec":{}})"), "metadata: required");
  EXPECT_EQ(ErrorOf(head + R"("metadata":[]})"), "metadata: expected object, got array");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{}})"), "metadata.name: required");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":""}})"), "metadata.name: required");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":5}})"),
            "metadata.name: expected string, got integer");
  DecodeError e = OneError(head + R"("metadata":{"name":"a","namespace":5}})");
  EXPECT_EQ(e.path, "metadata.namespace");
  EXPECT_FALSE(e.id.has_value());  // not "default/a": that could be some other object
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":"a","labels":{"a":1}}})"),
            "metadata.labels[a]: expected string, got integer");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":"a","labels":[]}})"),
            "metadata.labels: expected object, got array");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":"a","annotations":{"k.io/x":{}}}})"),
            "metadata.annotations[k.io/x]: expected string, got object");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":"a","uid":1}})"),
            "metadata.uid: expected string, got integer");
  EXPECT_EQ(ErrorOf(head + R"("metadata":{"name":"a","resourceVersion":42}})"),
            "metadata.resourceVersion: expected string, got integer");
}

TEST(DecodeServiceTest, ApiVersionMustBeV1) {
  EXPECT_EQ(ErrorOf(R"({"apiVersion":"v2","kind":"Service","metadata":{"name":"a"}})"),
            R"(apiVersion: must be "v1", got "v2")");
  EXPECT_EQ(ErrorOf(R"({"kind":"Service","metadata":{"name":"a"}})"),
            R"(apiVersion: required ("v1"))");
  EXPECT_EQ(ErrorOf(R"({"apiVersion":1,"kind":"Service","metadata":{"name":"a"}})"),
            "apiVersion: expected string, got integer");
}

TEST(DecodeServiceTest, YamlQuotedNumberIsAString) {
  const char* yaml = R"(
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  ports:
  - port: "80"
)";
  EXPECT_EQ(ErrorOf(yaml), "spec.ports[0].port: expected integer, got string");
  // A quoted targetPort is a port name, as for the API server.
  Service s = OneService(
      absl::StrReplaceAll(yaml, {{R"(- port: "80")", R"(- {port: 80, targetPort: "8080"})"}}));
  ASSERT_EQ(s.ports.size(), 1u);
  EXPECT_EQ(s.ports[0].target_port, (TargetPort{0, "8080"}));
}

TEST(DecodeServiceTest, YamlErrorsNamePathToo) {
  EXPECT_EQ(ErrorOf("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
                    "spec: {ports: [{port: 80, protocol: tcp}]}\n"),
            R"(spec.ports[0].protocol: must be one of "TCP", "UDP", "SCTP"; got "tcp")");
  EXPECT_EQ(ErrorOf("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
                    "spec: {ports: [{port: 80.5}]}\n"),
            "spec.ports[0].port: expected integer, got float");
}

// Names and port numbers are checked with sets: a Service of 60,000 ports decodes (it took
// seconds when each port was compared with every earlier one), and a duplicate at its end is
// still named.
TEST(ServicePortsTest, ManyPortsDecodeAndTheLastDuplicateIsNamed) {
  std::string ports;
  for (int i = 1; i <= 60000; ++i) {
    absl::StrAppend(&ports, i > 1 ? "," : "", R"({"name":"p)", i, R"(","port":)", i, "}");
  }
  auto json = [&](const std::string& extra) {
    return absl::StrCat(
        R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"big","namespace":"shop"},)",
        R"("spec":{"ports":[)", ports, extra, "]}}");
  };
  EXPECT_EQ(OneService(json("")).ports.size(), 60000u);
  DecodeError e = OneError(json(R"(,{"name":"last","port":59999})"));
  EXPECT_EQ(absl::StrCat(e.path, ": ", e.message), "spec.ports[60000]: duplicate port 59999/TCP");
  e = OneError(json(R"(,{"name":"p7","port":65000})"));
  EXPECT_EQ(absl::StrCat(e.path, ": ", e.message),
            R"(spec.ports[60000].name: duplicate name "p7")");
}

}  // namespace
}  // namespace sluice::config
