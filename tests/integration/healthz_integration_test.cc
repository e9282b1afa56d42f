// SPDX-License-Identifier: Apache-2.0
// Issue 26, row 4, against the real sluice-agent: clients that open connections to the healthz
// port (0.0.0.0:10256, which every pod can reach) and never finish a request leave kubelet's
// probe answered. With cpp-httplib's two handler threads, two such clients made /healthz time
// out, and a liveness probe would have restarted the agent.
#include <poll.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

constexpr char kHealthz[] = "http://127.0.0.1:10256/healthz";

// curl's view of /healthz: the status code, or "000" when it got no answer within 5 s (a hang
// detector, not a speed limit: kubelet's default probe timeout is 1 s).
std::string ProbeHealthz() {
  std::string out;
  testutil::RunCommand(
      {"curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", kHealthz}, &out);
  return out;
}

TEST_F(AgentTest, SlowClientsLeaveHealthzAnswering) {
  StartAgent({"--healthz-bind-address=0.0.0.0:10256"});
  ASSERT_TRUE(testutil::WaitFor([] { return ProbeHealthz() == "200"; }, absl::Seconds(10)))
      << agent_->Output();
  // Two, as in the report, and two more: more than the old server had threads.
  std::vector<base::UniqueFd> slow;
  for (int i = 0; i < 4; ++i) {
    int err = 0;
    slow.push_back(testutil::ConnectTcp(*net::SocketAddress::Parse("127.0.0.1:10256"), &err));
    ASSERT_TRUE(slow.back().valid()) << strerror(err);
    const std::string partial = "GET /healthz HTTP/1.1\r\nHost: node\r\nX-Slow: ";
    ASSERT_EQ(send(slow.back().get(), partial.data(), partial.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(partial.size()));
  }
  for (int probe = 0; probe < 3; ++probe) {
    EXPECT_EQ(ProbeHealthz(), "200") << "probe " << probe;
  }
  for (const base::UniqueFd& fd : slow) {
    pollfd p{fd.get(), POLLIN | POLLRDHUP, 0};
    EXPECT_EQ(poll(&p, 1, 0), 0) << "a slow client was dropped before its deadline";
  }
  EXPECT_TRUE(agent_->running()) << agent_->Output();
}

}  // namespace
}  // namespace sluice::testing
