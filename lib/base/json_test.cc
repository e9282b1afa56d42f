// SPDX-License-Identifier: Apache-2.0
#include "lib/base/json.h"

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

TEST(JsonStringTest, Escapes) {
  std::string out;
  AppendJsonString(std::string_view("a\"b\\c\nd\te\r\0f", 12), out);
  EXPECT_EQ(out, R"("a\"b\\c\nd\te\u000d\u0000f")");
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
}

}  // namespace
}  // namespace sluice::base
