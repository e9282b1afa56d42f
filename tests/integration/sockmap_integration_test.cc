// SPDX-License-Identifier: Apache-2.0
// The sockmap fast path through the real sluice-agent: the node-level choice and its
// fallbacks, the per-connection view, and bounded kernel memory with a slow backend.
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/unique_fd.h"
#include "lib/net/socket.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::ConnectTcp;
using testutil::TcpServer;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

const char kVip[] = "10.96.0.20:80";

// test/svc 10.96.0.20:80 -> 127.0.0.2:9000.
std::string ServiceManifest() {
  return ServiceYaml("svc", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
         SliceYaml("svc", {"127.0.0.2"}, {{"tcp", 9000}});
}

bool EchoOnce(int fd, const std::string& msg) {
  std::string got(msg.size(), '\0');
  return send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size()) &&
         recv(fd, got.data(), got.size(), MSG_WAITALL) == static_cast<ssize_t>(got.size()) &&
         got == msg;
}

// Machines that cannot load the fast path skip (CI runs where nothing skips).
class SockmapAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!IsSkipped()) {
      UseDatapath("sockmap");
    }
  }
};

TEST_F(SockmapAgentTest, AutoPicksSockmapAndShowsEachConnectionsPath) {
  datapath_ = "auto";
  auto backend = TcpServer::Start(Addr("127.0.0.2:9000"), TcpServer::Mode::kEcho);
  Write("svc.yaml", ServiceManifest());
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  EXPECT_EQ(Get("/proxyMode"), "sockmap");
  EXPECT_EQ(MetricValue("sluice_datapath{path=\"sockmap\"}"), 1);
  int err = 0;
  auto fd = ConnectTcp(Addr(kVip), &err);
  ASSERT_TRUE(fd) << strerror(err);
  ASSERT_TRUE(EchoOnce(fd.get(), "ping"));
  // Quiet for 50 ms: into the kernel (SockmapPromotion).
  std::string view;
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        view = Get("/debug/connections");
        return view.find("\"toBackend\": {\"state\": \"attached\"") != std::string::npos;
      },
      absl::Seconds(10)))
      << view;
  EXPECT_NE(view.find("\"path\": \"sockmap\""), std::string::npos) << view;
  EXPECT_NE(view.find("\"toBackend\": {\"state\": \"attached\""), std::string::npos) << view;
  EXPECT_NE(view.find("\"listener\": \"tcp/10.96.0.20:80\""), std::string::npos) << view;
  ASSERT_TRUE(EchoOnce(fd.get(), "pong!"));  // through the kernel
  fd.Reset();
  EXPECT_TRUE(testutil::WaitFor(
      [&] {
        return MetricValue(
                   "sluice_datapath_bytes_total{path=\"sockmap\",direction=\"to_client\"}") == 5;
      },
      absl::Seconds(5)));
  EXPECT_EQ(MetricValue("sluice_bytes_total{direction=\"to_client\"}"), 9);  // "ping" by the pump
  EXPECT_EQ(MetricValue("sluice_datapath_connections_total{path=\"sockmap\"}"), 1);
}

// Root without a capability the fast path needs: the agent still runs, on splice, and says
// why in one log line, a metric and /proxyMode. CAP_SYS_ADMIN goes too: it stands in for both.
struct Dropped {
  const char* caps;     // setpriv --bounding-set
  const char* missing;  // what the log line must name
};

class CapabilityFallbackTest : public AgentTest, public ::testing::WithParamInterface<Dropped> {
 protected:
  void SetUp() override {
    AgentTest::SetUp();
    if (!IsSkipped()) {
      UseDatapath("sockmap");  // only meaningful where the fast path works with all caps
    }
  }
  std::vector<std::string> Prefix() const {
    return {"setpriv", std::string("--bounding-set=") + GetParam().caps, "--"};
  }
  // Without CAP_NET_ADMIN the agent cannot add VIPs: put the service address on lo first and
  // let the agent find it already local.
  std::vector<std::string> Flags() {
    EXPECT_EQ(testutil::RunCommand({"ip", "addr", "add", "10.96.0.20/32", "dev", "lo"}), 0);
    return {"--vip-interface=lo"};
  }
};

INSTANTIATE_TEST_SUITE_P(
    Caps, CapabilityFallbackTest,
    ::testing::Values(Dropped{"-bpf,-sys_admin", "missing CAP_BPF"},
                      Dropped{"-net_admin,-sys_admin", "missing CAP_NET_ADMIN"}),
    [](const auto& info) { return std::string(info.index == 0 ? "NoCapBpf" : "NoCapNetAdmin"); });

TEST_P(CapabilityFallbackTest, AutoRunsOnSpliceAndSaysWhy) {
  datapath_ = "auto";
  auto backend = TcpServer::Start(Addr("127.0.0.2:9000"), TcpServer::Mode::kEcho);
  Write("svc.yaml", ServiceManifest());
  StartAgent(Flags(), Prefix());
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80")) << agent_->Output();
  EXPECT_EQ(Get("/proxyMode"), "splice");
  EXPECT_EQ(MetricValue("sluice_datapath{path=\"splice\"}"), 1);
  EXPECT_EQ(MetricValue("sluice_sockmap_unavailable{reason=\"permission\"}"), 1);
  const std::string log = agent_->Output();
  EXPECT_NE(log.find("datapath auto: using splice, sockmap unavailable (permission): " +
                     std::string(GetParam().missing)),
            std::string::npos)
      << log;
  int err = 0;
  auto fd = ConnectTcp(Addr(kVip), &err);
  ASSERT_TRUE(fd) << strerror(err);
  EXPECT_TRUE(EchoOnce(fd.get(), "still served"));
}

TEST_P(CapabilityFallbackTest, SockmapModeRefusesToStart) {
  std::vector<std::string> argv = Prefix();
  for (const std::string& a :
       {std::string(SLUICE_AGENT_BINARY), "--source=file:" + dir_,
        std::string("--healthz-bind-address="),
        absl::StrCat("--metrics-bind-address=127.0.0.1:", metrics_port_),
        std::string("--datapath=sockmap"), std::string("--socket-lb=off"),
        std::string("--bpf-root="), std::string("--external-datapath=proxy")}) {
    argv.push_back(a);
  }
  for (const auto& f : Flags()) {
    argv.push_back(f);
  }
  agent_ = std::make_unique<testutil::Subprocess>(argv);
  EXPECT_NE(agent_->Wait(absl::Seconds(10)), 0);
  const std::string log = agent_->Output();
  EXPECT_NE(log.find("--datapath=sockmap: the sockmap fast path is unavailable (permission)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(GetParam().missing), std::string::npos) << log;
}

// Memory the kernel charges to the TCP sockets of the test's network namespace (receive and
// send queues: the r and w fields of `ss -tm`; f, the reserve, can be negative). Bytes the kernel
// holds in a psock queue are charged to no socket (neither here nor in /proc/net/sockstat's "TCP:
// mem"), so the test bounds the payload bytes held for the connection as well.
uint64_t NetnsTcpMemory() {
  std::string out;
  testutil::RunCommand({"ss", "-tmnH"}, &out);
  uint64_t total = 0;
  for (size_t at = out.find("skmem:("); at != std::string::npos; at = out.find("skmem:(", at + 1)) {
    const size_t end = out.find(')', at);
    for (const char* field : {"(r", ",w"}) {
      const size_t f = out.find(field, at);
      if (f != std::string::npos && f < end) {
        total += std::stoull(out.substr(f + 2));
      }
    }
  }
  return total;
}

class SlowBackendTest : public DatapathTest {};
INSTANTIATE_TEST_SUITE_P(Paths, SlowBackendTest, ::testing::ValuesIn(kDatapaths), DatapathName);

// A client that can send at loopback speed and a backend that reads ~6 MB/s: without flow
// control the kernel queue between the proxy's sockets grows by the difference (hundreds of MiB
// in seconds). With it, what the kernel holds stays within the TCP buffers plus the watermark
// (about 25 MiB at the proxy on 6.18: a paused source's 4 MiB receive buffer, the psock queue,
// the backend socket's send buffer).
TEST_P(SlowBackendTest, FastClientKeepsKernelMemoryBounded) {
  constexpr uint64_t kLimit = uint64_t{64} << 20;
  std::atomic<uint64_t> received{0};
  std::atomic<bool> slow{true};
  uint64_t received_hash = 0;
  std::atomic<int> backend_fd{-1};
  // How the backend's read loop ended, and who it accepted, so a failure below says which side
  // closed. (Seen on every path, rarely: the backend's recv() interrupted with EINTR ended its
  // loop and reset the client; testutil::Recv retries now.)
  std::atomic<int> backend_end{1}, backend_errno{0}, backend_peer_port{0};
  testutil::ScriptedBackend backend(Addr("127.0.0.2:9000"), [&](int fd) {
    backend_fd = fd;
    if (auto peer = net::PeerAddress(fd); peer.ok()) {
      backend_peer_port = peer->port();
    }
    std::string buf(64 << 10, '\0');
    uint64_t hash = testutil::kFnvBasis;
    ssize_t n;
    while ((n = testutil::Recv(fd, buf.data(), slow ? 32 << 10 : buf.size())) > 0) {
      hash = testutil::Fnv64(hash, buf.data(), static_cast<size_t>(n));
      received += static_cast<uint64_t>(n);
      if (slow) {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    backend_errno = errno;
    backend_end = static_cast<int>(n);
    received_hash = hash;
  });
  Write("svc.yaml", ServiceManifest());
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  int err = 0;
  auto fd = ConnectTcp(Addr(kVip), &err);
  ASSERT_TRUE(fd) << strerror(err);
  // A quiet connection that turns bulk (a bulk one would stay on splice).
  ASSERT_TRUE(WaitEnrolled()) << Get("/debug/connections");
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) | O_NONBLOCK);

  const uint64_t mem_before = NetnsTcpMemory();
  uint64_t mem_peak = mem_before;
  absl::Time next_mem_sample;
  uint64_t sent = 0, gap_peak = 0, sent_hash = testutil::kFnvBasis;
  int64_t proxy_peak = 0;
  int blocked = 0;
  std::string buf(1 << 20, '\0');
  // At least 3 s, and on until the client has met a full buffer more than 10 times (on a busy
  // machine a 3 s window can end before the queues fill).
  constexpr int kBlocked = 10;
  const absl::Time min_end = absl::Now() + absl::Seconds(3);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while ((absl::Now() < min_end || blocked <= kBlocked) && absl::Now() < deadline) {
    testutil::FillStream(5, sent, buf.data(), buf.size());
    ssize_t n = send(fd.get(), buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent_hash = testutil::Fnv64(sent_hash, buf.data(), static_cast<size_t>(n));
      sent += static_cast<uint64_t>(n);
    } else {
      const int err = errno;
      auto local = net::LocalAddress(fd.get());
      ASSERT_EQ(err, EAGAIN) << strerror(err) << " after " << sent << " bytes; the backend ("
                             << "accepted a connection from port " << backend_peer_port
                             << ", the client's is " << (local.ok() ? local->port() : 0)
                             << ") received " << received << " and its recv() "
                             << (backend_end == 1
                                     ? std::string("was still reading")
                                     : absl::StrCat("returned ", backend_end.load(), " (",
                                                    strerror(backend_errno), ")"))
                             << "\n"
                             << agent_->Output();
      ++blocked;
      pollfd p{fd.get(), POLLOUT, 0};
      poll(&p, 1, 10);
    }
    gap_peak = std::max(gap_peak, sent - received.load());
    // Of those, the proxy's share: minus the client's send queue and the backend's receive
    // queue, which a direct connection would have too.
    int outq = 0, inq = 0;
    ioctl(fd.get(), SIOCOUTQ, &outq);
    if (const int b = backend_fd.load(); b >= 0) {
      ioctl(b, SIOCINQ, &inq);
    }
    proxy_peak =
        std::max<int64_t>(proxy_peak, static_cast<int64_t>(sent - received.load()) - outq - inq);
    if (absl::Now() > next_mem_sample) {  // ss costs a few ms: sample every 50 ms
      mem_peak = std::max(mem_peak, NetnsTcpMemory());
      next_mem_sample = absl::Now() + absl::Milliseconds(50);
    }
  }
  const uint64_t mem_growth = mem_peak - mem_before;
  RecordProperty("held_peak_bytes", std::to_string(gap_peak));
  RecordProperty("proxy_held_peak_bytes", std::to_string(proxy_peak));
  RecordProperty("socket_memory_growth_bytes", std::to_string(mem_growth));
  EXPECT_LT(gap_peak, kLimit) << "payload bytes held in the kernel";
  EXPECT_LT(mem_growth, kLimit) << "TCP socket memory";
  EXPECT_GT(blocked, kBlocked) << "the client was not faster than the backend";
  if (sockmap()) {
    EXPECT_GT(MetricValue("sluice_sockmap_pauses_total"), 0);
  }
  // Then everything arrives, in order.
  slow = false;
  fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  shutdown(fd.get(), SHUT_WR);
  backend.Join();
  EXPECT_EQ(received.load(), sent);
  EXPECT_EQ(received_hash, sent_hash);
  EXPECT_TRUE(testutil::WaitFor(
      [&] { return MetricValue("sluice_sockmap_paused_directions") == 0; }, absl::Seconds(5)));
}

}  // namespace
}  // namespace sluice::testing
