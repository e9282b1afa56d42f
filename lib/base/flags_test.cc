// SPDX-License-Identifier: Apache-2.0
#include "lib/base/flags.h"

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
    argv.reserve(args.size());
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

TEST_F(FlagSetTest, HelpPrintsEachDefaultOnce) {
  std::string id;
  double qps = 0;
  flags_.String("agent-id", &id, "Unique ID (default: random).");
  flags_.Double("qps", &qps, "Queries per second.");
  std::string help = flags_.Help();
  // Zero defaults are left out (pflag does the same), and so is one the help already states.
  EXPECT_EQ(help.find("(default false)"), std::string::npos) << help;
  EXPECT_EQ(help.find("(default [])"), std::string::npos) << help;
  EXPECT_EQ(help.find("(default 0)"), std::string::npos) << help;
  EXPECT_EQ(help.find("(default \"\")"), std::string::npos) << help;
  EXPECT_NE(help.find("Unique ID (default: random).\n"), std::string::npos) << help;
  EXPECT_NE(help.find("--qps float"), std::string::npos) << help;
}

TEST_F(FlagSetTest, DoubleAndChanged) {
  double qps = 0;
  flags_.Double("kubeconfig-qps", &qps, "qps");
  ASSERT_TRUE(Parse({"--kubeconfig-qps=2.5", "--keep-vips=false", "--workers=4"}).ok());
  EXPECT_EQ(qps, 2.5);
  EXPECT_TRUE(flags_.Changed("kubeconfig-qps"));
  EXPECT_FALSE(flags_.Changed("keep-vips"));  // given, but equal to the default
  EXPECT_TRUE(flags_.IsSet("keep-vips"));
  EXPECT_FALSE(flags_.Changed("sync-period"));
  EXPECT_FALSE(Parse({"--kubeconfig-qps=fast"}).ok());
}

TEST_F(FlagSetTest, ShorthandAndImpliedValue) {
  bool help = false;
  std::string version;
  flags_.Bool("help", &help, "help for prog");
  flags_.SetShorthand("help", 'h');
  flags_.String("version", &version, "Print version information and quit");
  flags_.SetImplied("version", "true");
  // A bare --version takes its implied value, so "--workers" that follows is a flag, not its
  // value; -h is --help.
  ASSERT_TRUE(Parse({"--version", "--workers=2", "-h"}).ok());
  EXPECT_TRUE(help);
  EXPECT_EQ(version, "true");
  EXPECT_EQ(o_.workers, 2);
  ASSERT_TRUE(Parse({"--version=raw"}).ok());
  EXPECT_EQ(version, "raw");
  // Only the one registered letter is a shorthand.
  EXPECT_NE(Parse({"-x"}).message().find("unknown flag --x"), std::string::npos);
  std::string help_text = flags_.Help();
  EXPECT_NE(help_text.find("  -h, --help\n      help for prog\n"), std::string::npos) << help_text;
  EXPECT_NE(help_text.find("  --version string[=true]\n"), std::string::npos) << help_text;
}

}  // namespace
}  // namespace sluice::base
