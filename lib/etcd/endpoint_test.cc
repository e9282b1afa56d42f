// SPDX-License-Identifier: Apache-2.0
#include "lib/etcd/endpoint.h"

#include "gtest/gtest.h"

namespace sluice::etcd {
namespace {

TEST(EndpointTest, ParsesHttpAndHttps) {
  auto ep = ParseEndpoint("http://127.0.0.1:2379");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_FALSE(ep->tls);
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 2379);
  EXPECT_EQ(ep->Target(), "127.0.0.1:2379");

  ep = ParseEndpoint("https://etcd-0.example.com:2379/");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_TRUE(ep->tls);
  EXPECT_EQ(ep->Target(), "etcd-0.example.com:2379");
  EXPECT_EQ(ep->url, "https://etcd-0.example.com:2379/");

  ep = ParseEndpoint("https://[fd00::5]:2379");
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_EQ(ep->host, "fd00::5");
  EXPECT_EQ(ep->Target(), "[fd00::5]:2379");
}

TEST(EndpointTest, RejectsWithTheReason) {
  struct Case {
    const char* url;
    const char* why;
  };
  for (const Case& c :
       {Case{"127.0.0.1:2379", "unknown scheme"}, Case{"unix:///run/etcd.sock", "unknown scheme"},
        Case{"http://127.0.0.1", "missing port"}, Case{"http://:2379", "missing host"},
        Case{"http://127.0.0.1:0", "port must be between"},
        Case{"http://127.0.0.1:99999", "port must be between"},
        Case{"http://127.0.0.1:2379/v3", "only a host and port"},
        Case{"http://user@127.0.0.1:2379", "only a host and port"},
        Case{"http://fd00::5:2379", "needs brackets"},
        Case{"http://[fd00::5]", "needs brackets and a port"}}) {
    auto ep = ParseEndpoint(c.url);
    ASSERT_FALSE(ep.ok()) << c.url;
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ep.status().message().find(c.why), absl::string_view::npos) << ep.status();
    EXPECT_NE(ep.status().message().find(c.url), absl::string_view::npos) << ep.status();
  }
}

}  // namespace
}  // namespace sluice::etcd
