// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/upstream_flags.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

#include "agent/base/log.h"
#include "tunnel/wire/cipher_suites.h"

namespace sluice::wire {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class LogOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-log-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(LogOutputTest, DefaultLeavesStderrAlone) {
  KlogFlags k;
  auto out = LogOutput::Start(k, "prog");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, nullptr);
}

TEST_F(LogOutputTest, LogFileGetsEveryLineAndHeadersCanBeSkipped) {
  KlogFlags k;
  k.logtostderr = false;
  k.log_dir = dir_;
  k.skip_headers = true;
  k.v = 2;
  {
    auto out = LogOutput::Start(k, "prog");
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_NE(*out, nullptr);
    LOG(INFO) << "first line";
    VLOG(2) << "verbose line";
    VLOG(3) << "too verbose";
  }
  base::SetVerbosity(0);
  EXPECT_EQ(Slurp(dir_ + "/prog.log"), "first line\nverbose line\n");
}

TEST_F(LogOutputTest, MaxSizeStartsTheFileAnew) {
  KlogFlags k;
  k.logtostderr = false;
  k.log_file = dir_ + "/x.log";
  k.log_file_max_size = 1;  // MB
  {
    auto out = LogOutput::Start(k, "prog");
    ASSERT_TRUE(out.ok()) << out.status();
    const std::string big(600 << 10, 'x');
    LOG(INFO) << big;
    LOG(INFO) << big;  // would pass 1 MiB: the file starts again with this line
  }
  const std::string got = Slurp(dir_ + "/x.log");
  EXPECT_LT(got.size(), 700u << 10);
  EXPECT_GT(got.size(), 600u << 10);
}

TEST_F(LogOutputTest, BadThresholdAndMissingDirAreErrors) {
  KlogFlags k;
  k.stderrthreshold = "LOUD";
  EXPECT_EQ(LogOutput::Start(k, "prog").status().code(), absl::StatusCode::kInvalidArgument);
  k.stderrthreshold = "warning";
  k.logtostderr = false;
  k.log_dir = dir_ + "/missing";
  EXPECT_EQ(LogOutput::Start(k, "prog").status().code(), absl::StatusCode::kNotFound);
}

TEST(WarnIgnoredFlagsTest, OnlyChangedFlagsAreReported) {
  bool profiling = false;
  std::string label = "k8s-app=konnectivity-server";
  base::FlagSet f("prog");
  f.Bool("enable-profiling", &profiling, "x");
  f.String("lease-label", &label, "x");
  std::vector<std::string> args = {"prog", "--enable-profiling", "--lease-label=" + label};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  ASSERT_TRUE(f.Parse(static_cast<int>(argv.size()), argv.data()).ok());
  testing::internal::CaptureStderr();
  const IgnoredFlag own[] = {{"lease-label", "no leases"}};
  WarnIgnoredFlags(f, own);  // --enable-profiling is on the list both binaries share
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string warning = "--enable-profiling is accepted for compatibility";
  ASSERT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning, err.find(warning) + 1), std::string::npos) << err;  // once
  EXPECT_EQ(err.find("lease-label"), std::string::npos) << err;  // set to its default
}

TEST(CipherSuitesTest, GoNamesBecomeAnOpenSslList) {
  auto list = OpenSslCipherList({"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256",
                                 "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-CHACHA20-POLY1305");
  EXPECT_EQ(*OpenSslCipherList({}), "");
  auto bad = OpenSslCipherList({"TLS_RSA_WITH_RC4_128_SHA"});
  EXPECT_NE(bad.status().message().find("considered as insecure"), std::string::npos);
}

}  // namespace
}  // namespace sluice::wire
