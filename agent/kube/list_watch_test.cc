// SPDX-License-Identifier: Apache-2.0
// The list/watch protocol itself is tested against a test API server in
// tests/integration/kube_source_integration_test.cc; these are its pure helpers.
#include "agent/kube/list_watch.h"

#include "gtest/gtest.h"

namespace sluice::kube {
namespace {

TEST(QueryEscapeTest, SelectorsAreEscaped) {
  EXPECT_EQ(QueryEscape("!service.kubernetes.io/service-proxy-name,a=b"),
            "%21service.kubernetes.io%2Fservice-proxy-name%2Ca%3Db");
  EXPECT_EQ(QueryEscape("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(QueryEscape("a b+"), "a%20b%2B");
}

TEST(StatusMessageTest, ReadsTheStatusMessage) {
  EXPECT_EQ(StatusMessage(R"({"kind":"Status","code":410,"message":"too old resource version"})"),
            "too old resource version");
  EXPECT_EQ(StatusMessage("Internal Server Error"), "Internal Server Error");
  EXPECT_EQ(StatusMessage(std::string(1000, 'x')).size(), 200u);
}

}  // namespace
}  // namespace sluice::kube
