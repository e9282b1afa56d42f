// SPDX-License-Identifier: Apache-2.0
#include "lib/http/status_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "lib/base/unique_fd.h"

#include "tests/testutil/fd_exhaustion.h"

namespace sluice::http {
namespace {

using base::UniqueFd;

// Generous: a hang detector, never a measure of speed.
constexpr int kPatienceSeconds = 5;

std::vector<StatusServer::Route> HealthRoutes() {
  return {{"/healthz",
           [] {
             return StatusServer::Reply{200, "ok"};
           }},
          {"/readyz", [] {
             return StatusServer::Reply{503, "not ready"};
           }}};
}

// A client socket from `source` (any 127/8 address is local) to 127.0.0.1:port, whose reads
// give up after kPatienceSeconds.
UniqueFd ConnectFrom(const std::string& source, int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &a.sin_addr);
  EXPECT_EQ(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << source;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  timeval tv{kPatienceSeconds, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void Send(const UniqueFd& fd, const std::string& bytes) {
  EXPECT_EQ(send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

struct Response {
  int code = -1;  // -1: the connection ended or the read timed out first
  std::string head;
  std::string body;
};

// Reads one response (its body by Content-Length); `buf` keeps what follows it.
Response Read(const UniqueFd& fd, std::string& buf, bool head_only = false) {
  Response r;
  size_t end;
  char chunk[4096];
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = recv(fd.get(), chunk, sizeof(chunk), 0);
    if (n <= 0) {
      return r;
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  r.head = buf.substr(0, end + 4);
  size_t length = 0;
  const size_t at = r.head.find("Content-Length: ");
  if (at == std::string::npos ||
      !absl::SimpleAtoi(r.head.substr(at + 16, r.head.find('\r', at) - at - 16), &length)) {
    return r;
  }
  length = head_only ? 0 : length;
  while (buf.size() < end + 4 + length) {
    const ssize_t n = recv(fd.get(), chunk, sizeof(chunk), 0);
    if (n <= 0) {
      return r;
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
  r.body = buf.substr(end + 4, length);
  buf.erase(0, end + 4 + length);
  (void)absl::SimpleAtoi(r.head.substr(9, 3), &r.code);
  return r;
}

Response Get(const UniqueFd& fd, const std::string& path) {
  Send(fd, "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n");
  std::string buf;
  return Read(fd, buf);
}

// One connection from each of `sources`, each served once: accepted and counted by the server.
std::vector<UniqueFd> Served(const std::vector<std::string>& sources, int port) {
  std::vector<UniqueFd> held;
  for (const std::string& source : sources) {
    held.push_back(ConnectFrom(source, port));
    EXPECT_EQ(Get(held.back(), "/healthz").code, 200) << source;
  }
  return held;
}

// The server closed the connection: EOF or a reset, not a read that timed out.
bool ClosedByServer(const UniqueFd& fd) {
  char c;
  ssize_t n;
  while ((n = recv(fd.get(), &c, 1, 0)) > 0) {
  }
  return n == 0 || errno == ECONNRESET;
}

// Nothing to read and no end seen, right now.
bool StillOpen(const UniqueFd& fd) {
  pollfd p{fd.get(), POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) == 0;
}

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

namespace sluice::http {
namespace {

// The reproduction of issue 26, row 4: slow-header clients, more than any fixed pool of threads,
// hold their connections while a probe still gets its answer. cpp-httplib's two handler threads
// were both held by two such clients and /healthz timed out.
TEST(StatusServerLimitsTest, SlowHeaderClientsDoNotStarveHealthz) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<UniqueFd> slow;
  for (int source = 2; source <= 5; ++source) {
    for (int i = 0; i < 8; ++i) {  // the per-source default: none of them is refused
      slow.push_back(ConnectFrom(absl::StrCat("127.0.0.", source), (*server)->port()));
      Send(slow.back(), "GET /healthz HTTP/1.1\r\nHost: test\r\n");  // never ends
    }
  }
  for (int i = 0; i < 3; ++i) {
    UniqueFd probe = ConnectFrom("127.0.0.1", (*server)->port());
    Response r = Get(probe, "/healthz");
    EXPECT_EQ(r.code, 200) << "probe " << i << " got no answer";
    EXPECT_EQ(r.body, "ok");
  }
  for (const UniqueFd& fd : slow) {
    EXPECT_TRUE(StillOpen(fd));
  }
}

TEST(StatusServerLimitsTest, ConnectionsOverThePerSourceCapAreClosed) {
  ServerLimits limits;
  limits.max_per_source = 3;
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes(), limits);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<UniqueFd> held = Served({"127.0.0.2", "127.0.0.2", "127.0.0.2"}, (*server)->port());
  UniqueFd extra = ConnectFrom("127.0.0.2", (*server)->port());
  EXPECT_TRUE(ClosedByServer(extra));
  UniqueFd other = ConnectFrom("127.0.0.3", (*server)->port());
  EXPECT_EQ(Get(other, "/healthz").code, 200);
  for (const UniqueFd& fd : held) {
    EXPECT_EQ(Get(fd, "/healthz").code, 200);  // kept: the cap refuses, it does not evict
  }
}

TEST(StatusServerLimitsTest, AtTheConnectionCapTheOldestMakesRoom) {
  ServerLimits limits;
  limits.max_connections = 4;
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes(), limits);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<UniqueFd> held =
      Served({"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}, (*server)->port());
  UniqueFd probe = ConnectFrom("127.0.0.1", (*server)->port());
  EXPECT_EQ(Get(probe, "/healthz").code, 200);
  EXPECT_TRUE(ClosedByServer(held[0]));
  for (size_t i = 1; i < held.size(); ++i) {
    EXPECT_EQ(Get(held[i], "/healthz").code, 200) << i;
  }
}

TEST(StatusServerLimitsTest, AHeadThatNeverEndsIsDroppedAtTheRequestDeadline) {
  ServerLimits limits;
  limits.request_timeout = absl::Milliseconds(200);
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes(), limits);
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd slow = ConnectFrom("127.0.0.1", (*server)->port());
  Send(slow, "GET /healthz HTTP/1.1\r\n");
  EXPECT_TRUE(ClosedByServer(slow));
}

TEST(StatusServerLimitsTest, OversizeHeadIsRefusedWith431AndClosed) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd fd = ConnectFrom("127.0.0.1", (*server)->port());
  Send(fd, "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(16384, 'a') + "\r\n\r\n");
  std::string buf;
  Response r = Read(fd, buf);
  EXPECT_EQ(r.code, 431);
  EXPECT_NE(r.head.find("Connection: close\r\n"), std::string::npos) << r.head;
  EXPECT_TRUE(ClosedByServer(fd));
}

TEST(StatusServerLimitsTest, BodiesAndOtherMethodsAreRefusedAndClosed) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  for (const auto& [request, code] : std::vector<std::pair<std::string, int>>{
           {"GET /healthz HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", 400},
           {"POST /healthz HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", 405},
           {"GET /healthz HTTP/3.0\r\n\r\n", 505},
           {"GET /healthz\r\n\r\n", 400}}) {
    UniqueFd fd = ConnectFrom("127.0.0.1", (*server)->port());
    Send(fd, request);
    std::string buf;
    EXPECT_EQ(Read(fd, buf).code, code) << request;
    EXPECT_TRUE(ClosedByServer(fd)) << request;
  }
}

TEST(StatusServerLimitsTest, KeepAliveAndPipelinedRequestsShareOneConnection) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd fd = ConnectFrom("127.0.0.1", (*server)->port());
  Response first = Get(fd, "/healthz");
  EXPECT_EQ(first.code, 200);
  EXPECT_EQ(first.head.find("Connection: close"), std::string::npos) << first.head;
  EXPECT_EQ(Get(fd, "/readyz").code, 503);
  Send(fd,
       "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\nHEAD /readyz HTTP/1.1\r\nHost: t\r\n\r\n"
       "GET /nothing HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  std::string buf;
  Response a = Read(fd, buf);
  Response b = Read(fd, buf, /*head_only=*/true);
  Response c = Read(fd, buf);
  EXPECT_EQ(a.code, 200);
  EXPECT_EQ(a.body, "ok");
  EXPECT_EQ(b.code, 503);
  EXPECT_NE(b.head.find("Content-Length: 9\r\n"), std::string::npos) << b.head;
  EXPECT_EQ(c.code, 404);
  EXPECT_TRUE(buf.empty()) << buf;
  EXPECT_TRUE(ClosedByServer(fd));
}

// Go's net/http keeps an idle kept-alive connection open (no IdleTimeout): scrapers that pool
// connections must not see theirs churn. The request deadline applies once a request begins.
TEST(StatusServerLimitsTest, AnIdleKeptAliveConnectionStaysOpenPastTheRequestDeadline) {
  ServerLimits limits;
  limits.request_timeout = absl::Milliseconds(200);
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes(), limits);
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd idle = ConnectFrom("127.0.0.1", (*server)->port());
  EXPECT_EQ(Get(idle, "/healthz").code, 200);
  // A witness started after the idle connection's last response: once the server dropped it
  // at the request deadline, that deadline has passed for the idle connection too.
  UniqueFd slow = ConnectFrom("127.0.0.2", (*server)->port());
  Send(slow, "GET /healthz HTTP/1.1\r\n");
  ASSERT_TRUE(ClosedByServer(slow));
  EXPECT_TRUE(StillOpen(idle));
  EXPECT_EQ(Get(idle, "/healthz").code, 200);
  // A request begun on the kept-alive connection still has the deadline.
  Send(idle, "GET /healthz HTTP/1.1\r\n");
  EXPECT_TRUE(ClosedByServer(idle));
}

TEST(StatusServerLimitsTest, AnIdleTimeoutClosesIdleConnections) {
  ServerLimits limits;
  limits.idle_timeout = absl::Milliseconds(200);
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes(), limits);
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd idle = ConnectFrom("127.0.0.1", (*server)->port());
  EXPECT_EQ(Get(idle, "/healthz").code, 200);
  EXPECT_TRUE(ClosedByServer(idle));
}

// Upstream proxy-agent's admin /metrics: a 301 to the health port on the host the client named.
TEST(StatusServerLimitsTest, RedirectToAnotherPortKeepsHostPathAndQuery) {
  auto server = StatusServer::Create("127.0.0.1", 0, {{"/metrics", [] {
                                                         StatusServer::Reply r;
                                                         r.redirect_port = 8093;
                                                         return r;
                                                       }}});
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd fd = ConnectFrom("127.0.0.1", (*server)->port());
  Send(fd, "GET /metrics?x=1 HTTP/1.1\r\nHost: node-a:8094\r\n\r\n");
  std::string buf;
  Response r = Read(fd, buf);
  EXPECT_EQ(r.code, 301);
  EXPECT_NE(r.head.find("Location: //node-a:8093/metrics?x=1\r\n"), std::string::npos) << r.head;
  EXPECT_NE(r.head.find("Content-Type: text/html; charset=utf-8\r\n"), std::string::npos);
  EXPECT_EQ(r.body, "<a href=\"//node-a:8093/metrics?x=1\">Moved Permanently</a>.\n\n");
  Send(fd, "GET /metrics HTTP/1.1\r\nHost: [fd00::1]:8094\r\n\r\n");
  r = Read(fd, buf);
  EXPECT_NE(r.head.find("Location: //[fd00::1]:8093/metrics\r\n"), std::string::npos) << r.head;
}

TEST(StatusServerLimitsTest, Http10ClosesUnlessAskedToKeepAlive) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd kept = ConnectFrom("127.0.0.1", (*server)->port());
  Send(kept, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  std::string buf;
  Response r = Read(kept, buf);
  EXPECT_EQ(r.code, 200);
  EXPECT_NE(r.head.find("Connection: keep-alive\r\n"), std::string::npos) << r.head;
  EXPECT_EQ(Get(kept, "/healthz").code, 200);
  UniqueFd closed = ConnectFrom("127.0.0.1", (*server)->port());
  Send(closed, "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(Read(closed, buf).code, 200);
  EXPECT_TRUE(ClosedByServer(closed));
}

TEST(StatusServerLimitsTest, AnyPathRouteAndExtraHeaders) {
  auto server = StatusServer::Create(
      "127.0.0.1", 0,
      {{"*", [] {
          return StatusServer::Reply{
              200, "{}", "application/json", {{"X-Load-Balancing-Endpoint-Weight", "1"}}};
        }}});
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd fd = ConnectFrom("127.0.0.1", (*server)->port());
  Response r = Get(fd, "/any/path?x=1");
  EXPECT_EQ(r.code, 200);
  EXPECT_NE(r.head.find("Content-Type: application/json\r\n"), std::string::npos) << r.head;
  EXPECT_NE(r.head.find("X-Load-Balancing-Endpoint-Weight: 1\r\n"), std::string::npos) << r.head;
}

// Out of descriptors, the server pauses accepting (event::Acceptor) and serves the queued
// client once descriptors are free again.
TEST(StatusServerLimitsTest, ServesAgainAfterRunningOutOfDescriptors) {
  auto server = StatusServer::Create("127.0.0.1", 0, HealthRoutes());
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd client(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  testutil::FdExhaustion exhausted;
  ASSERT_TRUE(exhausted.exhausted());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  ASSERT_EQ(connect(client.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{kPatienceSeconds, 0};
  setsockopt(client.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  Send(client, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
  // The server may have tried (and failed) to accept meanwhile; now it can.
  exhausted.Release();
  std::string buf;
  EXPECT_EQ(Read(client, buf).code, 200);
}

}  // namespace
}  // namespace sluice::http
