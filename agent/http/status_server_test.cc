// SPDX-License-Identifier: Apache-2.0
#include "agent/http/status_server.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace sluice::http {
namespace {

TEST(StatusServerTest, ServesRoutesWithTheirCodeAndContentType) {
  auto server = StatusServer::Create(
      "127.0.0.1", 0,
      {{"/healthz",
        [] {
          return StatusServer::Reply{200, "ok"};
        }},
       {"/readyz",
        [] {
          return StatusServer::Reply{503, "not ready"};
        }},
       {"/metrics", [] {
          return StatusServer::Reply{200, "m 1\n", "text/plain; version=0.0.4"};
        }}});
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  res = client.Get("/readyz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "not ready");
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  res = client.Get("/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(StatusServerTest, TakenPortFailsAtCreateNamingTheAddress) {
  auto first = StatusServer::Create("127.0.0.1", 0, {});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  auto taken = StatusServer::Create("127.0.0.1", port, {});
  ASSERT_FALSE(taken.ok());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(taken.status().message().find(absl::StrCat("127.0.0.1:", port)), std::string::npos)
      << taken.status();
}

// The destructor used to race the listener thread: a stop() before httplib's accept loop had
// started was lost and the join waited forever. Many rounds make the early stop likely.
TEST(StatusServerTest, DestroyedRightAfterCreateReturns) {
  for (int i = 0; i < 200; ++i) {
    auto server = StatusServer::Create("127.0.0.1", 0, {});
    ASSERT_TRUE(server.ok()) << server.status();
  }
}

// After destruction the port is free again: the listening socket was closed, not leaked.
TEST(StatusServerTest, PortIsFreeAfterDestruction) {
  auto first = StatusServer::Create("127.0.0.1", 0, {});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  first->reset();
  auto again = StatusServer::Create("127.0.0.1", port, {});
  EXPECT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace sluice::http
