// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/etcd_registry.h"

#include "gtest/gtest.h"

namespace sluice::sources {
namespace {

using Kind = RegistryKey::Kind;

TEST(RegistryLayoutTest, KeysAndRange) {
  RegistryLayout layout("/sluice/registry/");
  EXPECT_EQ(layout.prefix(), "/sluice/registry");
  EXPECT_EQ(layout.RangeStart(), "/sluice/registry/");
  EXPECT_EQ(layout.RangeEnd(), "/sluice/registry0");  // '/' + 1
  EXPECT_EQ(layout.Key(Kind::kService, {"demo", "web"}), "/sluice/registry/services/demo/web");
  EXPECT_EQ(layout.Key(Kind::kEndpointSlice, {"demo", "web-1"}),
            "/sluice/registry/endpointslices/demo/web-1");
}

TEST(RegistryLayoutTest, ParsesItsOwnKeys) {
  RegistryLayout layout("/r");
  auto key = layout.Parse("/r/services/demo/web");
  ASSERT_TRUE(key.ok() && key->has_value());
  EXPECT_EQ((*key)->kind, Kind::kService);
  EXPECT_EQ((*key)->id, (config::NamespacedName{"demo", "web"}));
  key = layout.Parse("/r/endpointslices/demo/web-abc12");
  ASSERT_TRUE(key.ok() && key->has_value());
  EXPECT_EQ((*key)->kind, Kind::kEndpointSlice);
  EXPECT_EQ((*key)->id, (config::NamespacedName{"demo", "web-abc12"}));
}

TEST(RegistryLayoutTest, IgnoresOtherResourcesAndRejectsBadShapes) {
  RegistryLayout layout("/r");
  for (const char* other : {"/r/configmaps/demo/x", "/r/servicesx/demo/x", "/other/services/a/b",
                            "/r", "/rservices/a/b"}) {
    auto key = layout.Parse(other);
    ASSERT_TRUE(key.ok()) << other;
    EXPECT_FALSE(key->has_value()) << other;
  }
  for (const char* bad : {"/r/services", "/r/services/", "/r/services/demo", "/r/services/demo/",
                          "/r/services//web", "/r/endpointslices/a/b/c"}) {
    auto key = layout.Parse(bad);
    ASSERT_FALSE(key.ok()) << bad;
    EXPECT_NE(key.status().message().find("NAMESPACE/NAME"), absl::string_view::npos);
  }
}

constexpr char kService[] = R"({"apiVersion": "v1", "kind": "Service",
  "metadata": {"name": "web", "namespace": "demo"},
  "spec": {"clusterIP": "10.96.0.10", "ports": [{"name": "http", "port": 80}]}})";

TEST(RegistryDecoderTest, DecodesAndChecksIdentity) {
  RegistryDecoder decoder;
  auto svc = decoder.Service({"demo", "web"}, kService);
  ASSERT_TRUE(svc.ok()) << svc.status();
  EXPECT_EQ((*svc)->ports.at(0).port, 80);

  svc = decoder.Service({"demo", "other"}, kService);
  ASSERT_FALSE(svc.ok());
  EXPECT_EQ(svc.status().message(), "metadata.name is \"web\" but the key names \"other\"");
  svc = decoder.Service({"prod", "web"}, kService);
  ASSERT_FALSE(svc.ok());
  EXPECT_EQ(svc.status().message(), "metadata.namespace is \"demo\" but the key names \"prod\"");
}

TEST(RegistryDecoderTest, KeyGivesTheNamespaceWhenTheValueHasNone) {
  RegistryDecoder decoder;
  auto slice = decoder.EndpointSlice({"demo", "web-1"}, R"({
    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
    "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
    "ports": [{"name": "http", "port": 8080}]})");
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ((*slice)->meta.id, (config::NamespacedName{"demo", "web-1"}));
  EXPECT_EQ((*slice)->service_name, "web");
}

TEST(RegistryDecoderTest, ReportsFieldPathsKindsAndSyntax) {
  RegistryDecoder decoder;
  auto svc = decoder.Service({"demo", "web"}, R"({"apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "web"}, "spec": {"ports": [{"port": 70000}]}})");
  ASSERT_FALSE(svc.ok());
  // Named by its key, not by the "default" namespace its metadata implies.
  EXPECT_EQ(svc.status().message(), "spec.ports[0].port: must be between 1 and 65535, got 70000");

  // An EndpointSlice stored under services/.
  svc = decoder.Service({"demo", "web"}, R"({"apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice", "metadata": {"name": "web"}, "addressType": "IPv4"})");
  ASSERT_FALSE(svc.ok());
  EXPECT_NE(svc.status().message().find("kind"), absl::string_view::npos) << svc.status();

  svc = decoder.Service({"demo", "web"}, "kind: Service\n");
  ASSERT_FALSE(svc.ok());
  EXPECT_NE(svc.status().message().find("value is not JSON"), absl::string_view::npos)
      << svc.status();
  // The parser is reused: a good value after bad ones still decodes.
  EXPECT_TRUE(decoder.Service({"demo", "web"}, kService).ok());
}

}  // namespace
}  // namespace sluice::sources
