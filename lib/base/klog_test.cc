// SPDX-License-Identifier: Apache-2.0
#include "lib/base/klog.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "lib/base/log.h"

namespace sluice::base {
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
  SetVerbosity(0);
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

// A symlink at the log path (the default one is in /tmp) is refused, not followed; a new file
// is created 0600 whatever the umask.
TEST_F(LogOutputTest, LogFileIsPrivateAndNeverASymlink) {
  const std::string target = dir_ + "/victim";
  std::ofstream(target) << "keep\n";
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/prog.log").c_str()), 0);
  KlogFlags k;
  k.logtostderr = false;
  k.log_dir = dir_;
  auto out = LogOutput::Start(k, "prog");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_NE(out.status().message().find("symbolic link"), std::string::npos) << out.status();
  EXPECT_EQ(Slurp(target), "keep\n");

  k.log_file = dir_ + "/new.log";
  const mode_t old_umask = umask(0);
  {
    auto created = LogOutput::Start(k, "prog");
    ASSERT_TRUE(created.ok()) << created.status();
  }
  umask(old_umask);
  struct stat st;
  ASSERT_EQ(lstat(k.log_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

TEST(WarnIgnoredFlagsTest, OnlyChangedFlagsAreReported) {
  bool profiling = false;
  std::string label = "k8s-app=konnectivity-server";
  FlagSet f("prog");
  f.Bool("profiling", &profiling, "x");
  f.String("lease-label", &label, "x");
  std::vector<std::string> args = {"prog", "--profiling", "--lease-label=" + label};
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  ASSERT_TRUE(f.Parse(static_cast<int>(argv.size()), argv.data()).ok());
  testing::internal::CaptureStderr();
  const IgnoredFlag own[] = {{"lease-label", "no leases"}};
  const IgnoredFlag shared[] = {{"profiling", "no pprof"}};
  WarnIgnoredFlags(f, "upstream", own, shared);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string warning = "--profiling is accepted for compatibility with upstream";
  ASSERT_NE(err.find(warning), std::string::npos) << err;
  EXPECT_EQ(err.find(warning, err.find(warning) + 1), std::string::npos) << err;  // once
  EXPECT_EQ(err.find("lease-label"), std::string::npos) << err;  // set to its default
}

}  // namespace
}  // namespace sluice::base
