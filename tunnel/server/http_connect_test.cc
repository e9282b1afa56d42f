// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/http_connect.h"

#include "gtest/gtest.h"

namespace sluice::tunnel::server {
namespace {

TEST(HttpConnectTest, ParsesHead) {
  EXPECT_EQ(ParseConnectHead("CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: x:1\r\n").authority,
            "10.0.0.5:10250");
  EXPECT_EQ(ParseConnectHead("CONNECT [fd00::1]:443 HTTP/1.1\r\n").authority, "[fd00::1]:443");
  EXPECT_EQ(ParseConnectHead("GET / HTTP/1.1\r\n").status, 405);
  // No port: dialled as it is (the agent answers Go's "missing port in address"), as upstream.
  EXPECT_EQ(ParseConnectHead("CONNECT nohost HTTP/1.1\r\n").authority, "nohost");
  EXPECT_EQ(ParseConnectHead("CONNECT nohost: HTTP/1.1\r\n").status, 400);
  EXPECT_EQ(ParseConnectHead("CONNECT /path HTTP/1.1\r\n").status, 400);
  EXPECT_EQ(ParseConnectHead("garbage\r\n").status, 400);
}

TEST(HttpConnectTest, ErrorReplies) {
  EXPECT_EQ(ConnectErrorReply("No agent available"),
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 50\r\nConnection: close\r\n\r\n"
            "currently no tunnels available: No agent available");
  EXPECT_EQ(ConnectErrorReply("dial tcp 1.2.3.4:5: i/o timeout").substr(0, 12), "HTTP/1.1 504");
  EXPECT_EQ(ConnectErrorReply("dial tcp: connection refused").substr(0, 12), "HTTP/1.1 502");
  EXPECT_EQ(ConnectErrorReply("socket: too many open files").substr(0, 12), "HTTP/1.1 503");
}

}  // namespace
}  // namespace sluice::tunnel::server
