// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/command_line.h"

#include "gtest/gtest.h"

namespace sluice::cli {
namespace {

class CommandLineTest : public ::testing::TestWithParam<Upstream> {
 protected:
  CommandLineTest() : flags_("prog") {
    flags_.String("mode", &mode_, "Mode");
    flags_.Int("port", &port_, "Port");
    RegisterStandardFlags(flags_, standard_, GetParam());
  }
  Outcome Run(std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    std::vector<char*> argv;
    for (auto& a : args) {
      argv.push_back(a.data());
    }
    absl::Status parsed = flags_.Parse(static_cast<int>(argv.size()), argv.data());
    return AfterParse(GetParam(), flags_, standard_, parsed,
                      [](const std::string& how) { return "prog 1.2.3 " + how; });
  }
  bool kube_proxy() const { return GetParam() == Upstream::kKubeProxy; }

  std::string mode_ = "grpc";
  int64_t port_ = 8090;
  StandardFlags standard_;
  base::FlagSet flags_;
};

TEST_P(CommandLineTest, HelpBesideOtherFlagsPrintsHelpAndExitsZero) {
  for (const char* help : {"-h", "--help"}) {
    Outcome o = Run({"--mode=http-connect", help, "--port", "9000"});
    EXPECT_EQ(o.exit_code, kExitOk) << help;
    EXPECT_EQ(o.out, flags_.Help()) << help;
    EXPECT_EQ(o.err, "") << help;
  }
  // Help is answered before the options are checked: a value no check would pass is fine.
  EXPECT_EQ(Run({"--mode=bogus", "-h"}).exit_code, kExitOk);
}

TEST_P(CommandLineTest, BadCommandLineExitsOneWithErrorAndUsage) {
  // A bad flag wins over -h, as in cobra (the parse fails before help is looked at).
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--no-such-flag"}, {"--port=x", "-h"}, {"stray"}, {"--version=maybe"}}) {
    Outcome o = Run(args);
    EXPECT_EQ(o.exit_code, kExitFailure) << args[0];
    EXPECT_EQ(o.out, "") << args[0];
    const size_t error = o.err.find("Error: ");
    const size_t usage = o.err.find("Usage: prog [flags]");
    ASSERT_NE(error, std::string::npos) << o.err;
    ASSERT_NE(usage, std::string::npos) << o.err;
    // component-base prints the usage first, so the error is the last line; cobra the error.
    EXPECT_EQ(usage < error, kube_proxy()) << o.err;
  }
  EXPECT_NE(Run({"--no-such-flag"}).err.find("Error: unknown flag --no-such-flag"),
            std::string::npos);
}

TEST_P(CommandLineTest, Version) {
  Outcome o = Run({"--version"});
  EXPECT_EQ(o.exit_code, kExitOk);
  EXPECT_EQ(o.out, "prog 1.2.3 true\n");
  EXPECT_EQ(Run({"--version=true"}).out, "prog 1.2.3 true\n");
  // --version=false runs the program, as with no --version.
  EXPECT_EQ(Run({"--version=false"}).exit_code, std::nullopt);
  EXPECT_EQ(Run({}).exit_code, std::nullopt);
  // --version=raw is kube-proxy's (verflag) only.
  Outcome raw = Run({"--version=raw"});
  EXPECT_EQ(raw.exit_code, kube_proxy() ? kExitOk : kExitFailure);
  EXPECT_EQ(raw.out, kube_proxy() ? "prog 1.2.3 raw\n" : "");
}

TEST_P(CommandLineTest, AskedSkipsConfiguration) {
  EXPECT_FALSE(standard_.Asked());
  ASSERT_EQ(Run({"--version=false"}).exit_code, std::nullopt);
  EXPECT_FALSE(standard_.Asked());
  Run({"--version"});
  EXPECT_TRUE(standard_.Asked());
}

TEST_P(CommandLineTest, RejectedConfiguration) {
  Outcome o = Rejected(GetParam(), flags_, absl::InvalidArgumentError("mode \"x\" is bad"));
  EXPECT_EQ(o.exit_code, kExitFailure);
  if (kube_proxy()) {
    // component-base: klog.ErrorS(err, "command failed"), no usage.
    EXPECT_EQ(o.err, "");
    EXPECT_EQ(o.log, "\"command failed\" err=\"mode \\\"x\\\" is bad\"");
  } else {
    EXPECT_EQ(o.err, "Error: mode \"x\" is bad\n" + flags_.Help() + "\n");
    EXPECT_EQ(o.log, "");
  }
}

INSTANTIATE_TEST_SUITE_P(Upstreams, CommandLineTest,
                         ::testing::Values(Upstream::kKubeProxy, Upstream::kKonnectivity),
                         [](const auto& info) {
                           return info.param == Upstream::kKubeProxy ? "KubeProxy" : "Konnectivity";
                         });

}  // namespace
}  // namespace sluice::cli
