// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/proxy_agent_options.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/base/status.h"

namespace sluice::tunnel::agent {
namespace {

absl::Status Parse(std::vector<std::string> args, ProxyAgentFlags& o) {
  base::FlagSet flags("sluice-proxy-agent");
  RegisterProxyAgentFlags(flags, o);
  args.insert(args.begin(), "sluice-proxy-agent");
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data()));
  return ValidateProxyAgentFlags(o);
}

TEST(ProxyAgentOptionsTest, UpstreamDefaults) {
  ProxyAgentFlags o;
  ASSERT_TRUE(Parse({}, o).ok());
  EXPECT_EQ(o.klog.v, 4);
  EXPECT_EQ(o.common.xfr_channel_size, 150);
  EXPECT_FALSE(o.common.warn_on_channel_limit);
  EXPECT_EQ(o.proxy_server_port, 8091);
}

TEST(ProxyAgentOptionsTest, RefusesWhatUpstreamRefuses) {
  struct Case {
    std::string arg;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"--proxy-server-port=0", "invalid value \"0\" for flag --proxy-server-port"},
      {"--health-server-port=-1", "invalid value \"-1\" for flag --health-server-port"},
      {"--admin-server-port=0", "invalid value \"0\" for flag --admin-server-port"},
      {"--enable-contention-profiling", "--enable-contention-profiling=true needs"},
      {"--agent-identifiers=hostname=a", "unknown identifier type \"hostname\""},
      {"--agent-identifiers=host=a%zz", "invalid URL escape"},
      {"--agent-identifiers=host=a;ipv4=1.2.3.4", "';'"},
      {"--server-count-source=min", "--server-count-source must be one of"},
  };
  for (const Case& c : cases) {
    ProxyAgentFlags o;
    absl::Status st = Parse({c.arg}, o);
    EXPECT_TRUE(absl::StrContains(st.message(), c.error)) << c.arg << ": " << st;
    if (absl::StartsWith(c.arg, "--agent-identifiers")) {
      EXPECT_TRUE(absl::StrContains(st.message(), "for flag --agent-identifiers")) << st;
    }
  }
}

TEST(ProxyAgentOptionsTest, AcceptsUpstreamIdentifiers) {
  for (const char* ids : {"", "host=node-a&ipv4=10.1.0.1", "ipv6=fd00%3A%3A1&cidr=10.0.0.0%2F8",
                          "default-route=true", "host=a+b&&cidr=10.0.0.0/8"}) {
    EXPECT_TRUE(ValidateAgentIdentifiers(ids, "agent-identifiers").ok()) << ids;
  }
}

}  // namespace
}  // namespace sluice::tunnel::agent
