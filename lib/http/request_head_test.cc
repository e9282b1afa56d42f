// SPDX-License-Identifier: Apache-2.0
#include "lib/http/request_head.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::http {
namespace {

constexpr size_t kMax = 8192;

TEST(RequestHeadTest, ParsesAGetAndReportsItsSize) {
  const std::string req = "GET /healthz?verbose HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\nGET /n";
  ParsedHead p = ParseRequestHead(req, kMax);
  ASSERT_EQ(p.status, 0);
  EXPECT_EQ(p.head.method, "GET");
  EXPECT_EQ(p.head.path, "/healthz");
  EXPECT_EQ(p.head.query, "verbose");
  EXPECT_EQ(p.head.host, "x");
  EXPECT_EQ(p.head.minor_version, 1);
  EXPECT_TRUE(p.head.keep_alive);
  EXPECT_FALSE(p.head.has_body);
  EXPECT_EQ(p.size, req.find("GET /n"));
}

TEST(RequestHeadTest, QueryWithoutFragmentAndNoHost) {
  ParsedHead p = ParseRequestHead("GET http://h:1/m?a=1&b#frag HTTP/1.1\r\n\r\n", kMax);
  ASSERT_EQ(p.status, 0);
  EXPECT_EQ(p.head.path, "/m");
  EXPECT_EQ(p.head.query, "a=1&b");
  EXPECT_EQ(p.head.host, "");
}

TEST(RequestHeadTest, IncompleteUntilTheEmptyLine) {
  EXPECT_EQ(ParseRequestHead("", kMax).status, -1);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n", kMax).status, -1);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n\r", kMax).status, -1);
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nHost: x\r\n\r\n", kMax).status, 0);
}

TEST(RequestHeadTest, BareLinefeedsAndLeadingEmptyLinesAreAccepted) {
  ParsedHead p = ParseRequestHead("\r\n\nGET /metrics HTTP/1.1\nHost: x\n\n", kMax);
  ASSERT_EQ(p.status, 0);
  EXPECT_EQ(p.head.path, "/metrics");
}

TEST(RequestHeadTest, ConnectionOptionsAndVersionDecideKeepAlive) {
  EXPECT_FALSE(
      ParseRequestHead("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n", kMax).head.keep_alive);
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.0\r\n\r\n", kMax).head.keep_alive);
  EXPECT_TRUE(ParseRequestHead("GET / HTTP/1.0\r\nConnection: TE, keep-alive\r\n\r\n", kMax)
                  .head.keep_alive);
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", kMax)
                   .head.keep_alive);
}

TEST(RequestHeadTest, AbsoluteFormBecomesItsPathOtherFormsNone) {
  EXPECT_EQ(ParseRequestHead("GET http://node:10256/healthz?x HTTP/1.1\r\n\r\n", kMax).head.path,
            "/healthz");
  EXPECT_EQ(ParseRequestHead("GET HTTP://node HTTP/1.1\r\n\r\n", kMax).head.path, "/");
  EXPECT_EQ(ParseRequestHead("CONNECT node:443 HTTP/1.1\r\n\r\n", kMax).head.path, "");
  EXPECT_EQ(ParseRequestHead("OPTIONS * HTTP/1.1\r\n\r\n", kMax).head.path, "");
}

TEST(RequestHeadTest, BodiesAreFlagged) {
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", kMax).head.has_body);
  EXPECT_TRUE(ParseRequestHead("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", kMax).head.has_body);
  EXPECT_TRUE(
      ParseRequestHead("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", kMax).head.has_body);
}

TEST(RequestHeadTest, MalformedHeadsAre400) {
  for (const char* bad : {
           "GET /\r\n\r\n",                                 // no version
           "GET  / HTTP/1.1\r\n\r\n",                       // two spaces
           "G(T / HTTP/1.1\r\n\r\n",                        // not a token
           "GET / HTTP/1.1 \r\n\r\n",                       // trailing space
           "GET / HTTP/11\r\n\r\n",                         // no dot
           "GET / HTTP/1.1\r\nHost : x\r\n\r\n",            // space before the colon
           "GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",  // obsolete fold
           "GET / HTTP/1.1\r\nNoColon\r\n\r\n", "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
           "GET / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n",
           "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",  // bare CR
       }) {
    EXPECT_EQ(ParseRequestHead(bad, kMax).status, 400) << bad;
  }
  constexpr char kNul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
  EXPECT_EQ(ParseRequestHead(std::string(kNul, sizeof(kNul) - 1), kMax).status, 400);
}

TEST(RequestHeadTest, OtherMajorVersionsAre505) {
  EXPECT_EQ(ParseRequestHead("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", kMax).status, 505);
}

TEST(RequestHeadTest, HeadsOverTheLimitAre431EvenBeforeTheyEnd) {
  const std::string start = "GET / HTTP/1.1\r\nX: " + std::string(100, 'a');
  EXPECT_EQ(ParseRequestHead(start, 64).status, 431);
  EXPECT_EQ(ParseRequestHead(start + "\r\n\r\n", 64).status, 431);
  EXPECT_EQ(ParseRequestHead(start, 4096).status, -1);
  // Exactly at the limit, the final empty line included, is allowed.
  const std::string exact = start + "\r\n\r\n";
  EXPECT_EQ(ParseRequestHead(exact, exact.size()).status, 0);
  EXPECT_EQ(ParseRequestHead(exact, exact.size() - 1).status, 431);
}

}  // namespace
}  // namespace sluice::http
