// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/yaml_to_json.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The JSON of a one-document stream.
std::string Json(std::string_view yaml) {
  absl::StatusOr<std::vector<std::string>> docs = YamlToJson(yaml);
  EXPECT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs.ok() ? docs->size() : 0, 1u);
  return docs.ok() && docs->size() == 1 ? (*docs)[0] : "";
}

std::string ErrorOf(std::string_view yaml) {
  absl::StatusOr<std::vector<std::string>> docs = YamlToJson(yaml);
  EXPECT_EQ(docs.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(docs.status().message());
}

TEST(YamlToJsonTest, PlainScalarsResolveByTheCoreSchema) {
  EXPECT_EQ(Json("[true, True, TRUE, false, FALSE, null, Null, ~, yes, no, on, off]"),
            R"([true,true,true,false,false,null,null,null,"yes","no","on","off"])");
  EXPECT_EQ(Json("[0, 80, -5, +7, 007, 0x1F, 0o17, 9223372036854775807, -9223372036854775808]"),
            "[0,80,-5,7,7,31,15,9223372036854775807,-9223372036854775808]");
  EXPECT_EQ(Json("[1.5, -0.25, .5, 5., 80.0, 1e3, 2E-2, +1.5e+2, 99999999999999999999]"),
            "[1.5,-0.25,0.5,5.0,80.0,1000.0,0.02,150.0,1e+20]");
  EXPECT_EQ(Json("[.inf, -.Inf, .nan, 1e999, 0x, 0o8, 1.2.3, 10.0.0.1, 1_000]"),
            R"([".inf","-.Inf",".nan","1e999","0x","0o8","1.2.3","10.0.0.1","1_000"])");
}

TEST(YamlToJsonTest, QuotedBlockAndStrTaggedScalarsStayStrings) {
  EXPECT_EQ(Json("a: \"80\"\nb: 'true'\nc: !!str 5\nd: |\n  x\n  y\ne: >\n  f\n  g\nf: ! 3\n"),
            R"({"a":"80","b":"true","c":"5","d":"x\ny\n","e":"f g\n","f":"3"})");
  EXPECT_EQ(Json("a: !!int \"6\"\nb: !!bool \"true\"\nc: !Ref web\nd: \"\"\n"),
            R"({"a":6,"b":true,"c":"web","d":""})");
}

TEST(YamlToJsonTest, EscapesStrings) {
  EXPECT_EQ(Json("s: \"q\\\"b\\\\t\\tn\\nc\\x01\\x1f\u00e9\"\n"),
            "{\"s\":\"q\\\"b\\\\t\\tn\\nc\\u0001\\u001f\u00e9\"}");
  EXPECT_EQ(Json("\"k\\\"ey\": 1\n"), R"({"k\"ey":1})");
}

TEST(YamlToJsonTest, KeysBecomeStrings) {
  EXPECT_EQ(Json("80: a\ntrue: b\n~: c\n1.5: d\n"),
            R"({"80":"a","true":"b","null":"c","1.5":"d"})");
}

TEST(YamlToJsonTest, Documents) {
  absl::StatusOr<std::vector<std::string>> docs = YamlToJson("a: 1\n---\n---\n# c\n---\n[1]\n");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_THAT(*docs, ElementsAre(R"({"a":1})", "null", "null", "[1]"));
  docs = YamlToJson("");
  ASSERT_TRUE(docs.ok());
  EXPECT_TRUE(docs->empty());
  EXPECT_EQ(Json("{}"), "{}");
  EXPECT_EQ(Json("[]"), "[]");
  EXPECT_EQ(Json("a: {}\nb: []\nc: [[], {}]\n"), R"({"a":{},"b":[],"c":[[],{}]})");
}

TEST(YamlToJsonTest, AliasesAndMergeKeys) {
  EXPECT_EQ(Json("a: &p {x: 1}\nb: *p\n"), R"({"a":{"x":1},"b":{"x":1}})");
  EXPECT_EQ(Json("base: &b {port: 80, protocol: UDP}\n"
                 "p: {<<: *b, port: 81, name: x}\n"),
            R"({"base":{"port":80,"protocol":"UDP"},"p":{"port":81,"name":"x","protocol":"UDP"}})");
  // Earlier sources in a list win; a quoted "<<" is an ordinary key.
  EXPECT_EQ(Json("a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc: {<<: [*a, *b], \"<<\": z}\n"),
            R"({"a":{"x":1},"b":{"x":2,"y":2},"c":{"<<":"z","x":1,"y":2}})");
  EXPECT_THAT(ErrorOf("a: {<<: 5}\n"),
              HasSubstr("a merge key (<<) takes a mapping or a list of mappings"));
}

TEST(YamlToJsonTest, RejectsWhatJsonCannotSayOrKubectlRejects) {
  EXPECT_EQ(ErrorOf("a: 1\nb: 2\na: 3\n"), "invalid YAML at line 3, column 1: duplicate key \"a\"");
  EXPECT_EQ(ErrorOf("? [1]\n: 2\n"),
            "invalid YAML at line 1, column 3: a mapping key must be a scalar");
  EXPECT_THAT(ErrorOf("a: &x [*x]\n"), HasSubstr("nested deeper than 512 levels"));
}

TEST(YamlToJsonTest, AliasBombIsCut) {
  std::string yaml = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    std::string prev(1, static_cast<char>(c - 1));
    absl::StrAppend(&yaml, std::string(1, c), ": &", std::string(1, c), " [");
    for (int i = 0; i < 10; ++i) {
      absl::StrAppend(&yaml, i ? ", " : "", "*", prev);
    }
    absl::StrAppend(&yaml, "]\n");
  }
  EXPECT_THAT(ErrorOf(yaml), HasSubstr("aliases expand to more than"));
}

TEST(YamlToJsonTest, SyntaxErrorsCarryTheMark) {
  EXPECT_EQ(ErrorOf("a: [1, 2]]\n"), "invalid YAML at line 1, column 10: illegal flow end");
  EXPECT_EQ(ErrorOf("a:\n  - b\n c: d\n"),
            "invalid YAML at line 3, column 2: end of map not found");
}

// yaml-cpp 0.7's LoadAll looped forever, allocating, on these (tests/fuzz/regressions/manifest).
TEST(YamlToJsonTest, StrayTopLevelCommaIsAnErrorNotAHang) {
  EXPECT_EQ(ErrorOf(","), "invalid YAML at line 1, column 1: unexpected ','");
  EXPECT_EQ(ErrorOf("kind: Service\n---\n[a] ,\n"),
            "invalid YAML at line 3, column 5: unexpected ','");
}

}  // namespace
}  // namespace sluice::config
