// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/bearer_token.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

class BearerTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-token-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/token";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string dir_;
  std::string path_;
};

TEST_F(BearerTokenTest, FixedToken) {
  auto t = BearerToken::Create("abc", "");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Get(), "abc");
  (*t)->Invalidate();
  EXPECT_EQ((*t)->Get(), "abc");
}

TEST_F(BearerTokenTest, FileIsTrimmedAndReReadWhenInvalidated) {
  Write("one\n");
  auto t = BearerToken::Create("", path_, absl::Hours(1));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Get(), "one");
  Write("two\n");
  EXPECT_EQ((*t)->Get(), "one");  // not due yet
  (*t)->Invalidate();
  EXPECT_EQ((*t)->Get(), "two");
}

TEST_F(BearerTokenTest, FileIsReReadPeriodically) {
  Write("one");
  base::FakeClock clock;
  auto t = BearerToken::Create("", path_, absl::Minutes(1), clock);
  ASSERT_TRUE(t.ok());
  Write("two");
  clock.Advance(absl::Seconds(59));
  EXPECT_EQ((*t)->Get(), "one");
  clock.Advance(absl::Seconds(1));
  EXPECT_EQ((*t)->Get(), "two");
}

TEST_F(BearerTokenTest, AFailedReReadKeepsTheLastToken) {
  Write("one");
  auto t = BearerToken::Create("", path_, absl::Hours(1));
  ASSERT_TRUE(t.ok());
  std::filesystem::remove(path_);
  (*t)->Invalidate();
  EXPECT_EQ((*t)->Get(), "one");
}

TEST_F(BearerTokenTest, MissingOrEmptyFileFailsAtStart) {
  EXPECT_FALSE(BearerToken::Create("", path_).ok());
  Write("  \n");
  EXPECT_EQ(BearerToken::Create("", path_).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::kube
