// SPDX-License-Identifier: Apache-2.0
// The list/watch protocol itself is tested against a test API server in
// tests/integration/kube_source_integration_test.cc; these are its pure helpers.
#include "lib/kube/list_watch.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

TEST(QueryEscapeTest, SelectorsAreEscaped) {
  EXPECT_EQ(QueryEscape("!service.kubernetes.io/service-proxy-name,a=b"),
            "%21service.kubernetes.io%2Fservice-proxy-name%2Ca%3Db");
  EXPECT_EQ(QueryEscape("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(QueryEscape("a b+"), "a%20b%2B");
}

TEST(StatusMessageTest, ReadsTheStatusMessage) {
  EXPECT_EQ(StatusMessage(R"({"kind":"Status","code":410,"message":"too old resource version"})"),
            "too old resource version");
  EXPECT_EQ(StatusMessage("Internal Server Error"), "Internal Server Error");
  EXPECT_EQ(StatusMessage(std::string(1000, 'x')).size(), 200u);
}

TEST(ParseListPageTest, ReadsMetadataAndItems) {
  simdjson::dom::parser parser;
  std::vector<std::string> names;
  auto page = ParseListPage(parser,
                            R"({"kind":"ServiceList","metadata":{"resourceVersion":"42",
                                "continue":"abc"},"items":[{"metadata":{"name":"a"}},
                                {"metadata":{"name":"b"}}]})",
                            [&](const simdjson::dom::element& item) {
                              names.emplace_back(item["metadata"]["name"].get_string().value());
                            });
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->resource_version, "42");
  EXPECT_EQ(page->continue_token, "abc");
  EXPECT_EQ(page->items, 2u);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
}

TEST(ParseListPageTest, RefusesBadPages) {
  simdjson::dom::parser parser;
  auto none = [](const simdjson::dom::element&) {};
  EXPECT_TRUE(
      ParseListPage(parser, R"({"metadata":{"resourceVersion":"1"},"items":null})", none).ok());
  EXPECT_FALSE(ParseListPage(parser, R"({"items":[]})", none).ok());
  EXPECT_FALSE(ParseListPage(parser, R"({"metadata":{"resourceVersion":""}})", none).ok());
  EXPECT_FALSE(
      ParseListPage(parser, R"({"metadata":{"resourceVersion":"1","continue":7}})", none).ok());
  EXPECT_FALSE(
      ParseListPage(parser, R"({"metadata":{"resourceVersion":"1"},"items":{}})", none).ok());
  EXPECT_FALSE(ParseListPage(parser, "[1,", none).ok());
}

}  // namespace
}  // namespace sluice::kube
