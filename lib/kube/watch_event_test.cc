// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/watch_event.h"

#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

TEST(EventTypeTest, Names) {
  EXPECT_STREQ(EventTypeName(EventType::kAdded), "ADDED");
  EXPECT_STREQ(EventTypeName(EventType::kDeleted), "DELETED");
}

TEST(DecodeWatchEventTest, ObjectEventsCarryTheirResourceVersion) {
  simdjson::dom::parser parser;
  absl::StatusOr<WatchEvent> event = DecodeWatchEvent(
      parser, R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"7"}}})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kind, WatchEvent::Kind::kObject);
  EXPECT_EQ(event->type, EventType::kModified);
  EXPECT_EQ(event->resource_version, "7");

  event = DecodeWatchEvent(parser, R"({"type":"BOOKMARK","object":{"metadata":{}}})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kind, WatchEvent::Kind::kBookmark);
  EXPECT_EQ(event->resource_version, "");
}

TEST(DecodeWatchEventTest, ErrorEventsCarryTheStatus) {
  simdjson::dom::parser parser;
  absl::StatusOr<WatchEvent> event = DecodeWatchEvent(
      parser, R"({"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->kind, WatchEvent::Kind::kError);
  EXPECT_EQ(event->error_code, 410);
  EXPECT_EQ(event->error_message, "too old");

  event = DecodeWatchEvent(parser, R"({"type":"ERROR","object":{"code":"410"}})");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->error_code, 0);
  EXPECT_EQ(event->error_message, "(no message)");
}

TEST(DecodeWatchEventTest, RejectsMalformedLines) {
  simdjson::dom::parser parser;
  for (const char* line : {"{", R"({"type":"ADDED"})", R"({"type":"ADDED","object":[]})",
                           R"({"type":1,"object":{}})", R"({"type":"RENAMED","object":{}})"}) {
    absl::StatusOr<WatchEvent> event = DecodeWatchEvent(parser, line);
    EXPECT_EQ(event.status().code(), absl::StatusCode::kInvalidArgument) << line;
  }
}

}  // namespace
}  // namespace sluice::kube
