// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/line_splitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

class LineSplitterTest : public ::testing::Test {
 protected:
  absl::Status Feed(LineSplitter& s, std::string_view bytes) {
    return s.Feed(bytes, [this](std::string_view line) {
      lines_.emplace_back(line);
      return absl::OkStatus();
    });
  }
  std::vector<std::string> lines_;
};

TEST_F(LineSplitterTest, ChunkBoundariesAreNotEventBoundaries) {
  LineSplitter s(1024);
  ASSERT_TRUE(Feed(s, "{\"a\":").ok());
  EXPECT_TRUE(lines_.empty());
  EXPECT_EQ(s.pending(), 5u);
  ASSERT_TRUE(Feed(s, "1}\n{\"b\":2}\n{\"c\"").ok());
  ASSERT_TRUE(Feed(s, ":3}\r\n\n").ok());
  EXPECT_EQ(lines_, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"}));
  EXPECT_EQ(s.pending(), 0u);
}

TEST_F(LineSplitterTest, OneByteAtATime) {
  LineSplitter s(1024);
  for (char c : std::string("ab\ncd\n")) {
    ASSERT_TRUE(Feed(s, std::string_view(&c, 1)).ok());
  }
  EXPECT_EQ(lines_, (std::vector<std::string>{"ab", "cd"}));
}

TEST_F(LineSplitterTest, RefusesALineOverTheCap) {
  LineSplitter s(8);
  ASSERT_TRUE(Feed(s, "12345678\n").ok());  // exactly the cap
  ASSERT_TRUE(Feed(s, "12345").ok());
  absl::Status st = Feed(s, "6789\n");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(lines_, (std::vector<std::string>{"12345678"}));
}

TEST_F(LineSplitterTest, StopsAtTheFirstError) {
  LineSplitter s(64);
  int calls = 0;
  absl::Status st = s.Feed("a\nb\nc\n", [&](std::string_view) {
    return ++calls == 2 ? absl::AbortedError("stop") : absl::OkStatus();
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace sluice::kube
