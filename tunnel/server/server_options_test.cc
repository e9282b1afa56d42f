// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/server_options.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lib/base/status.h"

namespace sluice::tunnel::server {
namespace {

// Parses `args` over upstream's defaults plus a Unix-socket frontend and agent-port
// certificates (names only: validation does not open them).
absl::Status Parse(std::vector<std::string> args, ServerOptions& o) {
  base::FlagSet flags("sluice-tunnel-server");
  RegisterServerFlags(flags, o);
  args.insert(args.begin(), {"sluice-tunnel-server", "--uds-name=/tmp/x.sock",
                             "--cluster-cert=c.crt", "--cluster-key=c.key"});
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data()));
  return ValidateServerOptions(o);
}

TEST(ServerOptionsTest, UpstreamDefaults) {
  ServerOptions o;
  ASSERT_TRUE(Parse({}, o).ok());
  EXPECT_EQ(o.klog.v, 4);  // upstream's cmd/server sets -v 4
  EXPECT_EQ(o.common.xfr_channel_size, 10);
  EXPECT_TRUE(o.common.warn_on_channel_limit);
  EXPECT_EQ(o.server_port, 8090);
}

TEST(ServerOptionsTest, RefusesWhatUpstreamRefuses) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"--enable-contention-profiling"}, "--enable-contention-profiling=true needs"},
      {{"--xfr-channel-size=0"}, "invalid value \"0\" for flag --xfr-channel-size"},
      {{"--xfr-channel-size=-1"}, "invalid value \"-1\" for flag --xfr-channel-size"},
      {{"--uds-name=", "--server-cert=s.crt", "--server-key=s.key", "--server-ca-cert=ca.crt",
        "--server-port=80"},
       "invalid value \"80\" for flag --server-port"},
  };
  for (const Case& c : cases) {
    ServerOptions o;
    absl::Status st = Parse(c.args, o);
    EXPECT_TRUE(absl::StrContains(st.message(), c.error)) << c.args[0] << ": " << st;
  }
  ServerOptions o;
  EXPECT_TRUE(Parse({"--enable-profiling", "--enable-contention-profiling"}, o).ok());
  ServerOptions uds;
  EXPECT_TRUE(Parse({"--server-port=80"}, uds).ok()) << "no TCP frontend: the port is unused";
}

}  // namespace
}  // namespace sluice::tunnel::server
