// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/decode.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"

#include "agent/control/config/decode_test_util.h"

namespace sluice::config {
namespace {

using testing::Decode;
using ::testing::HasSubstr;
using testing::Ip;

constexpr char kSvcA[] =
    R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"},
        "spec":{"clusterIP":"10.0.0.1","ports":[{"port":80}]}})";
constexpr char kSliceA[] =
    R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"a-1","namespace":"ns","labels":{"kubernetes.io/service-name":"a"}},
        "addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1"]}],"ports":[{"port":8080}]})";
constexpr char kConfigMap[] =
    R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}})";

std::vector<std::string> Names(const Manifest& m) {
  std::vector<std::string> out;
  for (const auto& s : m.services) {
    out.push_back("svc:" + s->meta.id.ToString());
  }
  for (const auto& s : m.endpoint_slices) {
    out.push_back("slice:" + s->meta.id.ToString());
  }
  return out;
}

TEST(DecodeManifestTest, SingleJsonObject) {
  Manifest m = Decode(kSvcA);
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a"));
  EXPECT_EQ(m.services[0]->cluster_ips, std::vector<net::IpAddress>{Ip("10.0.0.1")});
  EXPECT_TRUE(m.errors.empty());
  EXPECT_EQ(m.ignored, 0);
}

TEST(DecodeManifestTest, JsonListWithIgnoredKinds) {
  Manifest m = Decode(absl::StrCat(R"({"apiVersion":"v1","kind":"List","items":[)", kSvcA, ",",
                                   kConfigMap, ",", kSliceA, R"(,{"kind":"Deployment"}]})"));
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a", "slice:ns/a-1"));
  EXPECT_EQ(m.endpoint_slices[0]->service_name, "a");
  EXPECT_EQ(m.ignored, 2);
  EXPECT_TRUE(m.errors.empty());
}

TEST(DecodeManifestTest, JsonArray) {
  Manifest m = Decode(absl::StrCat("[", kSliceA, ",", kConfigMap, ",", kSvcA, "]"));
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a", "slice:ns/a-1"));
  EXPECT_EQ(m.ignored, 1);
}

TEST(DecodeManifestTest, TypedListItemsInheritKindAndApiVersion) {
  // What `GET /api/v1/services` returns: items without kind or apiVersion.
  Manifest m = Decode(R"({"apiVersion":"v1","kind":"ServiceList","metadata":{},"items":[
      {"metadata":{"name":"a"}},{"metadata":{"name":"b"},"spec":{"clusterIP":"None"}}]})");
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:default/a", "svc:default/b"));
  EXPECT_TRUE(m.services[1]->headless);
  Manifest slices = Decode(R"({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSliceList",
      "items":[{"metadata":{"name":"s"},"addressType":"IPv6"}]})");
  EXPECT_THAT(Names(slices), ::testing::ElementsAre("slice:default/s"));
  // A generic List implies nothing.
  Manifest generic = Decode(R"({"apiVersion":"v1","kind":"List","items":[
      {"metadata":{"name":"a"}},{"kind":"Service","metadata":{"name":"b"}}]})");
  ASSERT_EQ(generic.errors.size(), 2u);
  EXPECT_EQ(generic.errors[0].ToString(), "object default/a (items[0]): kind: required");
  EXPECT_EQ(generic.errors[1].ToString(),
            R"(Service default/b (items[1]): apiVersion: required ("v1"))");
}

TEST(DecodeManifestTest, NestedListsAndEmptyItems) {
  Manifest m = Decode(absl::StrCat(R"({"kind":"List","items":[{"kind":"List","items":[)", kSvcA,
                                   R"(]},{"kind":"ConfigMapList","items":null}]})"));
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a"));
  EXPECT_TRUE(m.errors.empty());
  Manifest bad = Decode(R"({"kind":"List","items":{}})");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].ToString(), "List: items: expected array, got object");
}

constexpr char kMultiDoc[] = R"(# leading comment
apiVersion: v1
kind: Service
metadata: {name: a, namespace: ns}
spec: {clusterIP: 10.0.0.1, ports: [{port: 80}]}
---
---
# an empty document: only a comment
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c}
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: b, namespace: ns}
  spec: {ports: [{port: 0}]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: a-1
    namespace: ns
    labels: {kubernetes.io/service-name: a}
  addressType: IPv4
  endpoints: [{addresses: [10.1.0.1]}]
---
- apiVersion: v1
  kind: Service
  metadata: {name: c, namespace: ns}
  spec: {clusterIP: bogus}
)";

TEST(DecodeManifestTest, MultiDocumentYamlSkipsEmptyDocumentsAndNamesLocations) {
  Manifest m = Decode(kMultiDoc);
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a", "slice:ns/a-1"));
  EXPECT_EQ(m.ignored, 1);
  ASSERT_EQ(m.errors.size(), 2u);
  // Empty documents count in the numbering, so that "document 5" is the fifth in the file.
  EXPECT_EQ(m.errors[0].kind, "Service");
  EXPECT_EQ(m.errors[0].id, (NamespacedName{"ns", "b"}));
  EXPECT_EQ(m.errors[0].location, "document 5, items[0]");
  EXPECT_EQ(m.errors[0].path, "spec.ports[0].port");
  EXPECT_EQ(m.errors[0].message, "must be between 1 and 65535, got 0");
  EXPECT_EQ(m.errors[0].ToString(),
            "Service ns/b (document 5, items[0]): spec.ports[0].port: must be between 1 and "
            "65535, got 0");
  EXPECT_EQ(m.errors[1].ToString(),
            R"(Service ns/c (document 6, [0]): spec.clusterIP: must be a valid IP address, )"
            R"(got "bogus")");
}

TEST(DecodeManifestTest, BadObjectAmongGoodOnesInJsonArray) {
  Manifest m = Decode(absl::StrCat(
      "[", kSvcA, ",",
      R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop"},
          "spec":{"ports":[{"name":"a","port":80},{"name":"b","port":"http"}]}},)",
      kSliceA, "]"));
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:ns/a", "slice:ns/a-1"));
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors[0].ToString(),
            "Service shop/web ([1]): spec.ports[1].port: expected integer, got string");
}

TEST(DecodeManifestTest, ObjectsThatAreNotObjects) {
  Manifest m = Decode(R"([1, {"metadata":{"name":"x"}}, {"kind":7}, {"kind":""}])");
  ASSERT_EQ(m.errors.size(), 4u);
  EXPECT_EQ(m.errors[0].ToString(), "object ([0]): expected object, got integer");
  EXPECT_EQ(m.errors[1].ToString(), "object default/x ([1]): kind: required");
  EXPECT_EQ(m.errors[2].ToString(), "object ([2]): kind: expected string, got integer");
  EXPECT_EQ(m.errors[3].ToString(), "object ([3]): kind: required");
  Manifest scalar = Decode("just some text\n");
  ASSERT_EQ(scalar.errors.size(), 1u);
  EXPECT_EQ(scalar.errors[0].ToString(), "object: expected object, got string");
}

TEST(DecodeManifestTest, EmptyInputs) {
  for (const char* text : {"", "   \n", "# nothing here\n", "---\n---\n", "null", "[]"}) {
    Manifest m = Decode(text);
    EXPECT_TRUE(m.services.empty() && m.endpoint_slices.empty() && m.errors.empty()) << text;
    EXPECT_EQ(m.ignored, 0);
  }
}

TEST(DecodeManifestTest, FormatSelection) {
  // JSON is YAML, so kYaml reads it too; kJson does not read YAML.
  EXPECT_EQ(Decode(kSvcA, Format::kYaml).services.size(), 1u);
  absl::StatusOr<Manifest> m = DecodeManifest("kind: Service\n", Format::kJson);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON"));
  // A byte-order mark does not hide the JSON.
  EXPECT_EQ(Decode(absl::StrCat("\xEF\xBB\xBF  ", kSvcA)).services.size(), 1u);
  EXPECT_EQ(Decode(absl::StrCat("\xEF\xBB\xBF",
                                "apiVersion: v1\nkind: Service\n"
                                "metadata: {name: a}\n"))
                .services.size(),
            1u);
}

TEST(DecodeManifestTest, InvalidJsonNamesLineAndColumn) {
  absl::StatusOr<Manifest> m =
      DecodeManifest("{\n  \"kind\": \"Service\",\n  \"spec\": 1,\n}\n", Format::kJson);
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON at line 4, column 1: "));
  m = DecodeManifest("[{\"a\": 1},\n {\"b\": tru}]", Format::kJson);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON at line 2, column 8: "));
  m = DecodeManifest("{\"a\": 1} {\"b\": 2}", Format::kJson);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON at line 1, column 10: "));
  m = DecodeManifest("{\"a\": [1, 2", Format::kJson);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON at line 1, column "));
  // An unclosed string is found before simdjson tracks positions.
  m = DecodeManifest("{\"a\": \"open}", Format::kJson);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("invalid JSON: "));
}

TEST(DecodeManifestTest, AutoTriesFlowYamlButReportsTheJsonError) {
  Manifest m = Decode("{apiVersion: v1, kind: Service, metadata: {name: web}}");
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:default/web"));
  absl::StatusOr<Manifest> bad = DecodeManifest("[{\"a\": 1},\n {\"b\": 2]]");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("invalid JSON at line 2, column "));
}

TEST(DecodeManifestTest, InvalidYamlNamesLineAndColumn) {
  absl::StatusOr<Manifest> m = DecodeManifest(
      "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80");
  ASSERT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.status().message(), "invalid YAML at line 6, column 1: end of map flow not found");
  m = DecodeManifest("apiVersion: v1\nkind: Service\nmetadata:\n  name: \"web");
  EXPECT_EQ(std::string(m.status().message()),
            "invalid YAML at line 4, column 13: illegal EOF in scalar");
  m = DecodeManifest("a: b\n  c: d\n");
  EXPECT_EQ(m.status().message(), "invalid YAML at line 2, column 4: illegal map value");
  // A syntax error anywhere fails the whole stream, good documents included.
  m = DecodeManifest(absl::StrCat(kSvcA, "\n---\nkind: [\n"));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeManifestTest, InvalidUtf8InYaml) {
  absl::StatusOr<Manifest> m = DecodeManifest("kind: \"\xff\xfe\"\n");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DecodeErrorTest, ToStringFormat) {
  EXPECT_EQ((DecodeError{"Service", NamespacedName{"default", "web"}, "document 2",
                         "spec.ports[0].port", "must be between 1 and 65535, got 70000"})
                .ToString(),
            "Service default/web (document 2): spec.ports[0].port: must be between 1 and 65535, "
            "got 70000");
  EXPECT_EQ(
      (DecodeError{"EndpointSlice", std::nullopt, "", "metadata.name", "required"}).ToString(),
      "EndpointSlice: metadata.name: required");
  EXPECT_EQ((DecodeError{"", std::nullopt, "[3]", "", "expected object, got null"}).ToString(),
            "object ([3]): expected object, got null");
}

class DecodeElementTest : public ::testing::Test {
 protected:
  simdjson::dom::element Parse(std::string_view json) {
    simdjson::dom::element e;
    EXPECT_EQ(parser_.parse(json.data(), json.size()).get(e), simdjson::SUCCESS) << json;
    return e;
  }
  simdjson::dom::parser parser_;
};

TEST_F(DecodeElementTest, Service) {
  absl::StatusOr<ServicePtr> s = DecodeService(Parse(kSvcA));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->meta.id, (NamespacedName{"ns", "a"}));
  // List items from the API server carry neither kind nor apiVersion.
  s = DecodeService(Parse(R"({"metadata":{"name":"b"},"spec":{"ports":[{"port":443}]}})"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->ports[0].port, 443);
  s = DecodeService(Parse(R"({"metadata":{"name":"b","namespace":"x"},"spec":{"ports":[{}]}})"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "Service x/b: spec.ports[0].port: required");
  s = DecodeService(Parse(kSliceA));
  EXPECT_EQ(s.status().message(),
            R"(Service ns/a-1: kind: must be "Service", got "EndpointSlice")");
  s = DecodeService(Parse(R"({"apiVersion":"v2","metadata":{"name":"b"}})"));
  EXPECT_EQ(s.status().message(), R"(Service default/b: apiVersion: must be "v1", got "v2")");
  s = DecodeService(Parse("[]"));
  EXPECT_EQ(s.status().message(), "Service: expected object, got array");
}

TEST_F(DecodeElementTest, EndpointSlice) {
  absl::StatusOr<EndpointSlicePtr> s = DecodeEndpointSlice(Parse(kSliceA));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->service_name, "a");
  EXPECT_EQ((*s)->endpoints[0].addresses, std::vector<net::IpAddress>{Ip("10.1.0.1")});
  s = DecodeEndpointSlice(Parse(R"({"metadata":{"name":"s"},"addressType":"IPv4",
      "endpoints":[{"addresses":["fd00::1"]}]})"));
  EXPECT_EQ(s.status().message(),
            "EndpointSlice default/s: endpoints[0].addresses[0]: must be an IPv4 address "
            "(addressType), got \"fd00::1\"");
  s = DecodeEndpointSlice(Parse(kSvcA));
  EXPECT_EQ(s.status().message(),
            R"(EndpointSlice ns/a: kind: must be "EndpointSlice", got "Service")");
}

TEST(DecodeManifestTest, ExampleFilesDecode) {
  constexpr char kExample[] = R"(
apiVersion: v1
kind: Service
metadata:
  name: hello
  namespace: demo
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports:
  - name: http
    protocol: TCP
    port: 80
    targetPort: 8080
  - name: echo-udp
    protocol: UDP
    port: 5300
    targetPort: 5300
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: hello-abc12
  namespace: demo
  labels:
    kubernetes.io/service-name: hello
addressType: IPv4
endpoints:
- addresses: ["127.0.0.2"]
  conditions: {ready: true}
  nodeName: local
ports:
- name: http
  protocol: TCP
  port: 8080
)";
  // The example's "pods" listen on loopback: scripts/run-example.sh passes
  // --allow-loopback, and without it the slice is refused.
  EXPECT_EQ(Decode(kExample).errors.size(), 1u);
  Manifest m = Decode(kExample, Format::kAuto, {.allow_loopback = true});
  EXPECT_THAT(Names(m), ::testing::ElementsAre("svc:demo/hello", "slice:demo/hello-abc12"));
  EXPECT_EQ(m.services[0]->ports[1],
            (ServicePort{"echo-udp", Protocol::kUdp, 5300, {5300, ""}, 0, ""}));
  EXPECT_EQ(m.endpoint_slices[0]->endpoints[0].node_name, "local");
}

}  // namespace
}  // namespace sluice::config
