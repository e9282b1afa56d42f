// SPDX-License-Identifier: Apache-2.0
#include "lib/base/option_table.h"

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

struct Opts {
  std::string name = "x";
  int64_t count = 3;
  bool quiet = false;
  std::vector<std::string> items;
};

std::vector<Option> Table(Opts& o) {
  return {
      {"name", &o.name, "A name."},
      {"count", &o.count, "A count.", Option::Origin::kUpstream, "spec.count",
       "nothing counts here"},
      {"quiet", &o.quiet, "Accepted.", Option::Origin::kUpstream, "", "always loud"},
      {"item", &o.items, "Items | more.", Option::Origin::kSluice, "", "", Option::kRepeated},
  };
}

TEST(OptionTableTest, RegistersRowsWithTheirDefaults) {
  Opts o;
  FlagSet flags("prog");
  RegisterOptions(flags, Table(o));
  char arg0[] = "prog";
  char arg1[] = "--item=a,b";
  char arg2[] = "--count=4";
  char* argv[] = {arg0, arg1, arg2};
  ASSERT_TRUE(flags.Parse(3, argv).ok());
  EXPECT_EQ(o.items, std::vector<std::string>{"a,b"});  // repeated: commas kept
  EXPECT_EQ(o.count, 4);
  EXPECT_EQ(flags.DefaultText("count"), "3");
  EXPECT_EQ(flags.TypeName("quiet"), "");
  EXPECT_NE(flags.Help().find("--name string\n      A name. (default \"x\")"), std::string::npos)
      << flags.Help();
}

TEST(OptionTableTest, ReportsOnlyChangedIgnoredRowsOfOneOrigin) {
  Opts o;
  FlagSet flags("prog");
  const std::vector<Option> table = Table(o);
  RegisterOptions(flags, table);
  ASSERT_TRUE(flags.Set("count", "3", FlagSet::Origin::kCommandLine).ok());  // the default
  EXPECT_TRUE(Unapplied(flags, table, Option::Origin::kUpstream, "up").empty());
  ASSERT_TRUE(flags.Set("count", "5", FlagSet::Origin::kCommandLine).ok());
  ASSERT_TRUE(flags.Set("name", "y", FlagSet::Origin::kCommandLine).ok());
  EXPECT_EQ(Unapplied(flags, table, Option::Origin::kUpstream, "up"),
            std::vector<std::string>{
                "--count (spec.count) is accepted for compatibility with up and has no effect: "
                "nothing counts here"});
  EXPECT_TRUE(Unapplied(flags, table, Option::Origin::kKlog, "up").empty());
  EXPECT_EQ(FindOption(table, "quiet")->why, "always loud");
  EXPECT_EQ(FindOption(table, "nope"), nullptr);
}

TEST(OptionTableTest, MarkdownHasOneRowPerOption) {
  Opts o;
  FlagSet flags("prog");
  const std::vector<Option> table = Table(o);
  RegisterOptions(flags, table);
  EXPECT_EQ(OptionsMarkdown(table, flags, "upstream"),
            "| flag | type | default | upstream | in sluice | meaning |\n"
            "|---|---|---|---|---|---|\n"
            "| `--name` | string | `\"x\"` | — | used | A name. |\n"
            "| `--count` | int | `3` | `spec.count` | reported: nothing counts here | A count. |\n"
            "| `--quiet` | bool | `false` | flag | reported: always loud | Accepted. |\n"
            "| `--item` | string | `[]` | — | used | Items \\| more. |\n");
}

}  // namespace
}  // namespace sluice::base
