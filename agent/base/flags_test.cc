// SPDX-License-Identifier: Apache-2.0
#include "agent/base/flags.h"

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

struct Opts {
  std::string bind = "0.0.0.0:10256";
  int64_t workers = 0;
  bool keep = false;
  absl::Duration period = absl::Seconds(30);
  std::vector<std::string> cidrs;
  std::vector<std::string> sources;
};

class FlagSetTest : public ::testing::Test {
 protected:
  FlagSetTest() : flags_("prog") {
    flags_.String("healthz-bind-address", &o_.bind, "bind");
    flags_.Int("workers", &o_.workers, "workers");
    flags_.Bool("keep-vips", &o_.keep, "keep");
    flags_.Duration("sync-period", &o_.period, "period");
    flags_.List("nodeport-addresses", &o_.cidrs, "cidrs");
    flags_.Repeated("source", &o_.sources, "sources");
  }
  absl::Status Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    return flags_.Parse(static_cast<int>(argv.size()), argv.data());
  }
  Opts o_;
  FlagSet flags_;
};

TEST_F(FlagSetTest, AcceptsEverySpelling) {
  ASSERT_TRUE(Parse({"--healthz_bind_address=1.2.3.4:1", "-workers", "3", "--keep-vips",
                     "--sync-period=1m30s", "--nodeport-addresses=10.0.0.0/8, fd00::/8", "--source",
                     "file:/a", "--source=etcd:http://x:1,http://y:2"})
                  .ok());
  EXPECT_EQ(o_.bind, "1.2.3.4:1");
  EXPECT_EQ(o_.workers, 3);
  EXPECT_TRUE(o_.keep);
  EXPECT_EQ(o_.period, absl::Seconds(90));
  EXPECT_EQ(o_.cidrs, (std::vector<std::string>{"10.0.0.0/8", "fd00::/8"}));
  EXPECT_EQ(o_.sources, (std::vector<std::string>{"file:/a", "etcd:http://x:1,http://y:2"}));
  EXPECT_TRUE(flags_.IsSet("keepVips"));
}

TEST_F(FlagSetTest, EmptyListLiteralAndBoolFalse) {
  o_.cidrs = {"0.0.0.0/0"};
  ASSERT_TRUE(Parse({"--nodeport-addresses=[]", "--keep-vips=false"}).ok());
  EXPECT_TRUE(o_.cidrs.empty());
  EXPECT_FALSE(o_.keep);
}

TEST_F(FlagSetTest, ErrorsNameTheFlagAndValue) {
  absl::Status st = Parse({"--sync-period=soon"});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("\"soon\" for flag --sync-period"), std::string::npos) << st;
  st = Parse({"--no-such-flag=1"});
  EXPECT_NE(st.message().find("unknown flag --no-such-flag"), std::string::npos) << st;
  st = Parse({"--workers"});
  EXPECT_NE(st.message().find("--workers needs a value"), std::string::npos) << st;
  st = Parse({"positional"});
  EXPECT_NE(st.message().find("unexpected argument \"positional\""), std::string::npos) << st;
  EXPECT_FALSE(Parse({"--sync-period=-1s"}).ok());
  EXPECT_FALSE(Parse({"--keep-vips=maybe"}).ok());
}

TEST_F(FlagSetTest, CommandLineWinsOverConfigFile) {
  ASSERT_TRUE(Parse({"--workers=2"}).ok());
  ASSERT_TRUE(flags_.Set("workers", "7", FlagSet::Origin::kConfigFile).ok());
  ASSERT_TRUE(flags_.Set("syncPeriod", "5s", FlagSet::Origin::kConfigFile).ok());
  EXPECT_EQ(o_.workers, 2);
  EXPECT_EQ(o_.period, absl::Seconds(5));
}

TEST_F(FlagSetTest, HelpListsDefaults) {
  std::string help = flags_.Help();
  EXPECT_NE(help.find("--sync-period duration"), std::string::npos) << help;
  EXPECT_NE(help.find("(default 30s)"), std::string::npos) << help;
  EXPECT_NE(help.find("(default \"0.0.0.0:10256\")"), std::string::npos) << help;
}

}  // namespace
}  // namespace sluice::base
