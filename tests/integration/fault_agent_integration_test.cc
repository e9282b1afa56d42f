// SPDX-License-Identifier: Apache-2.0
// Fault matrix, node rows (docs/operations.md, "Fault behaviour"): the real sluice-agent killed
// with SIGKILL under load and restarted, a backend process killed mid-stream, a backend that
// never reads, thousands of clients that do not read, and a service added while the agent is
// out of descriptors. Each test asserts that what can be kept is kept and that nothing hangs;
// durations are only generous hang detectors.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/unique_fd.h"

#include "tests/integration/agent_fixture.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::testing {
namespace {

using testutil::ConnectTcp;
using testutil::Hello;
using testutil::TcpServer;
using testutil::WaitFor;

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

// An ASan build (this test's and so the agent's) keeps freed memory in its quarantine and pads
// every allocation, so resident memory bounds are looser there.
#if defined(__SANITIZE_ADDRESS__)
constexpr int64_t kRssFactor = 8;
#else
constexpr int64_t kRssFactor = 1;
#endif

// Resident memory of a process in KiB (VmRSS), or -1.
int64_t RssKib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stoll(line.substr(6));
    }
  }
  return -1;
}

int OpenFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// How often `ip` is an address of lo.
int VipCount(const std::string& ip) {
  std::string out;
  testutil::RunCommand({"ip", "-o", "addr", "show", "dev", "lo"}, &out);
  int n = 0;
  for (size_t at = out.find(" " + ip + "/"); at != std::string::npos;
       at = out.find(" " + ip + "/", at + 1)) {
    ++n;
  }
  return n;
}

// The splice and sockmap paths (socket LB has no process in the path; its kill -9 row is
// SocketLbTest.AgentKillAndRestartKeepsTranslating).
class NodeFaultTest : public DatapathTest {
 protected:
  // Sum of every sluice_connections_closed_total series with this reason.
  double ClosedFor(const std::string& reason) {
    std::istringstream in(Metrics());
    std::string line;
    double sum = 0;
    while (std::getline(in, line)) {
      if (line.rfind("sluice_connections_closed_total{", 0) == 0 &&
          line.find("reason=\"" + reason + "\"") != std::string::npos) {
        sum += std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return sum;
  }
  // The client end of a connection through `vip`, with 10 s send/receive timeouts so that a
  // lost end of stream fails the test instead of hanging it.
  base::UniqueFd Connect(const std::string& vip) {
    int err = 0;
    auto fd = ConnectTcp(Addr(vip), &err);
    EXPECT_TRUE(fd) << vip << ": " << strerror(err);
    timeval tv{10, 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
  }
};
INSTANTIATE_TEST_SUITE_P(Paths, NodeFaultTest, ::testing::Values("splice", "sockmap"),
                         DatapathName);

// kill -9 under load, then a restart: the new agent adopts the VIPs left on the node (no
// duplicate, and the VIP of a service removed meanwhile goes), its listeners come back and new
// connections are served. The killed agent's connections die with it: the kernel closes its
// sockets, so their clients read the end of the stream (or a reset) at once. No process holds
// them any more, so they cannot be kept.
TEST_P(NodeFaultTest, KillNineUnderLoadThenRestart) {
  auto a = TcpServer::Start(Addr("127.0.0.2:8080"), TcpServer::Mode::kHello, 0, "a");
  auto echo = TcpServer::Start(Addr("127.0.0.4:9000"), TcpServer::Mode::kEcho);
  ASSERT_TRUE(a && echo);
  Write("web.yaml", ServiceYaml("web", {"10.96.0.10"}, {{"http", 80}}) + "---\n" +
                        SliceYaml("web", {"127.0.0.2"}, {{"http", 8080}}));
  Write("gone.yaml", ServiceYaml("gone", {"10.96.0.11"}, {{"http", 80}}) + "---\n" +
                         SliceYaml("gone", {"127.0.0.2"}, {{"http", 8080}}));
  Write("echo.yaml", ServiceYaml("echo", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
                         SliceYaml("echo", {"127.0.0.4"}, {{"tcp", 9000}}));
  StartAgent();
  for (const char* l : {"tcp/10.96.0.10:80", "tcp/10.96.0.11:80", "tcp/10.96.0.20:80"}) {
    ASSERT_TRUE(WaitListener(l)) << agent_->Output();
  }
  ASSERT_TRUE(WaitVip("10.96.0.11"));
  auto old_conn = Connect("10.96.0.20:80");
  char c = 'x';
  ASSERT_EQ(send(old_conn.get(), &c, 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(old_conn.get(), &c, 1, 0), 1);
  auto load = std::make_unique<testutil::HelloLoad>("10.96.0.10:80");
  ASSERT_TRUE(WaitFor([&] { return load->ok > 20; }, absl::Seconds(10)));

  ASSERT_TRUE(agent_->Signal(SIGKILL));
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 128 + SIGKILL);
  // The old connection ends: EOF, or a reset when the agent had unread bytes.
  ssize_t n = recv(old_conn.get(), &c, 1, 0);
  const int recv_errno = errno;
  EXPECT_TRUE(n == 0 || (n < 0 && recv_errno == ECONNRESET))
      << n << ": " << strerror(recv_errno) << " (EAGAIN: the end never came)";
  EXPECT_EQ(VipCount("10.96.0.10"), 1) << "kill -9 cleans nothing up; the VIPs stay";
  Remove("gone.yaml");  // while no agent runs

  const absl::Time restart = absl::Now();
  StartAgent();
  ASSERT_TRUE(WaitFor([&] { return Hello("10.96.0.10:80") == "a"; }, absl::Seconds(20)))
      << agent_->Output();
  RecordProperty("restart_to_served_ms",
                 absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - restart)));
  // Served within a generous bound of the restart (the agent's start, one sync).
  EXPECT_LT(absl::Now() - restart, absl::Seconds(10));
  EXPECT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  EXPECT_TRUE(WaitFor([&] { return VipCount("10.96.0.11") == 0; }, absl::Seconds(10)))
      << "the adopted VIP of the removed service stays";
  EXPECT_EQ(VipCount("10.96.0.10"), 1);
  EXPECT_EQ(VipCount("10.96.0.20"), 1);
  // Once back, the load runs without a failure.
  const int failed_after_recovery = load->failed;
  const int ok_after_recovery = load->ok;
  ASSERT_TRUE(WaitFor([&] { return load->ok > ok_after_recovery + 50; }, absl::Seconds(20)));
  EXPECT_EQ(load->failed, failed_after_recovery);
  load.reset();
  auto new_conn = Connect("10.96.0.20:80");
  ASSERT_EQ(send(new_conn.get(), "y", 1, MSG_NOSIGNAL), 1);
  ASSERT_EQ(recv(new_conn.get(), &c, 1, 0), 1);
  EXPECT_EQ(c, 'y');
}

// A backend process killed with SIGKILL in the middle of a download and of an upload: the
// client reads the end of the stream or a reset, and a writing client gets an error; neither
// waits for a timeout. The agent forgets both connections once their clients close.
TEST_P(NodeFaultTest, BackendKilledMidStream) {
  // socat -u copies one way only: /dev/zero to the client, the client to /dev/null.
  auto down = std::make_unique<testutil::Subprocess>(std::vector<std::string>{
      "socat", "-u", "OPEN:/dev/zero", "TCP-LISTEN:9000,bind=127.0.0.2,reuseaddr"});
  auto up = std::make_unique<testutil::Subprocess>(std::vector<std::string>{
      "socat", "-u", "TCP-LISTEN:9001,bind=127.0.0.3,reuseaddr", "OPEN:/dev/null"});
  Write("svc.yaml", ServiceYaml("down", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
                        SliceYaml("down", {"127.0.0.2"}, {{"tcp", 9000}}) + "---\n" +
                        ServiceYaml("up", {"10.96.0.21"}, {{"tcp", 80}}) + "---\n" +
                        SliceYaml("up", {"127.0.0.3"}, {{"tcp", 9001}}));
  for (int port : {9000, 9001}) {
    ASSERT_TRUE(WaitFor(
        [&] {
          std::string out;
          testutil::RunCommand({"ss", "-Htln", "sport", "=", absl::StrCat(":", port)}, &out);
          return !out.empty();
        },
        absl::Seconds(10)))
        << "socat on " << port << ": " << down->Output() << up->Output();
  }
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  ASSERT_TRUE(WaitListener("tcp/10.96.0.21:80"));
  auto down_conn = Connect("10.96.0.20:80");
  auto up_conn = Connect("10.96.0.21:80");
  std::string buf(64 << 10, '\0');
  uint64_t got = 0;
  while (got < (4 << 20)) {
    ssize_t n = recv(down_conn.get(), buf.data(), buf.size(), 0);
    ASSERT_GT(n, 0) << strerror(errno) << "\n" << agent_->Output();
    got += static_cast<uint64_t>(n);
  }
  uint64_t sent = 0;
  while (sent < (4 << 20)) {
    ssize_t n = send(up_conn.get(), buf.data(), buf.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << strerror(errno);
    sent += static_cast<uint64_t>(n);
  }

  ASSERT_TRUE(down->Signal(SIGKILL));
  ASSERT_TRUE(up->Signal(SIGKILL));
  const absl::Time killed = absl::Now();
  // Download: the bytes already on their way, then EOF or a reset.
  ssize_t n;
  while ((n = recv(down_conn.get(), buf.data(), buf.size(), 0)) > 0) {
  }
  const int down_errno = errno;
  EXPECT_TRUE(n == 0 || down_errno == ECONNRESET)
      << strerror(down_errno) << " (EAGAIN: the end never came)";
  // Upload: the writer gets an error.
  while ((n = send(up_conn.get(), buf.data(), buf.size(), MSG_NOSIGNAL)) > 0) {
  }
  const int up_errno = errno;
  EXPECT_TRUE(up_errno == ECONNRESET || up_errno == EPIPE)
      << strerror(up_errno) << " (EAGAIN: the writer was left hanging)";
  RecordProperty("kill_to_both_ended_ms",
                 absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - killed)));
  // The download is half-closed (the client may still send), until the client closes too.
  down_conn.Reset();
  up_conn.Reset();
  EXPECT_TRUE(
      WaitFor([&] { return MetricValue("sluice_connections_active") == 0; }, absl::Seconds(10)))
      << Metrics();
}

// A backend that accepts and never reads, and a client that writes as fast as it can: the
// bytes wait in kernel buffers (flow control), the agent's memory does not grow with them, and
// --tcp-idle-timeout resets both ends once nothing moves.
TEST_P(NodeFaultTest, BackendThatNeverReadsIsBoundedAndTimesOut) {
  constexpr int64_t kRssGrowthLimitKib = kRssFactor * (16 << 10);         // no per-byte buffering
  base::UniqueFd listener = testutil::ListenTcp(Addr("127.0.0.2:9000"));  // nobody accepts
  ASSERT_TRUE(listener);
  Write("svc.yaml", ServiceYaml("svc", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
                        SliceYaml("svc", {"127.0.0.2"}, {{"tcp", 9000}}));
  StartAgent({"--tcp-idle-timeout=2s"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  const int64_t rss_before = RssKib(agent_->pid());
  auto fd = Connect("10.96.0.20:80");
  timeval short_tv{0, 200000};  // poll the timer while blocked
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &short_tv, sizeof(short_tv));
  std::string buf(1 << 20, 'x');
  uint64_t sent = 0;
  int64_t rss_peak = rss_before;
  int err = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(60)) {
    ssize_t n = send(fd.get(), buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<uint64_t>(n);
    } else if (errno != EAGAIN && errno != EINTR) {
      err = errno;
      break;
    }
    rss_peak = std::max(rss_peak, RssKib(agent_->pid()));
  }
  const absl::Duration ended_after = absl::Now() - start;
  RecordProperty("bytes_accepted_before_reset", absl::StrCat(sent));
  RecordProperty("agent_rss_growth_kib", absl::StrCat(rss_peak - rss_before));
  RecordProperty("reset_after_ms", absl::StrCat(absl::ToInt64Milliseconds(ended_after)));
  EXPECT_TRUE(err == ECONNRESET || err == EPIPE) << strerror(err) << " after " << sent << " bytes";
  EXPECT_LT(ended_after, absl::Seconds(30)) << "idle timeout 2s";
  EXPECT_LT(rss_peak - rss_before, kRssGrowthLimitKib);
  // Kernel buffers only: a few MiB, not what a client could push in seconds on loopback.
  EXPECT_LT(sent, uint64_t{64} << 20);
  EXPECT_TRUE(WaitFor([&] { return ClosedFor("idle_timeout") == 1; }, absl::Seconds(5)))
      << Metrics();
}

// 2,000 clients with 4 KiB receive buffers that do not read while their backends send 128 KiB
// each: the agent holds thousands of stalled directions, its memory stays under a bound (the
// bytes wait in kernel buffers, not in the agent), then every client reads every byte intact
// and the agent's descriptors go back to their baseline.
TEST_P(NodeFaultTest, ThousandsOfSlowReadersAreBoundedAndLoseNothing) {
  constexpr int kConns = 2000;
  constexpr uint64_t kBytes = 128 << 10;
  constexpr int64_t kRssGrowthLimitKib = kRssFactor * (100 << 10);  // ~50 KiB a connection
  auto backend = TcpServer::Start(Addr("127.0.0.2:9000"), TcpServer::Mode::kSpeakFirst, kBytes);
  ASSERT_TRUE(backend);
  Write("svc.yaml", ServiceYaml("svc", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
                        SliceYaml("svc", {"127.0.0.2"}, {{"tcp", 9000}}));
  StartAgent();
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  const int64_t rss_before = RssKib(agent_->pid());
  const int fds_before = OpenFds(agent_->pid());
  std::vector<base::UniqueFd> clients;
  sockaddr_storage ss;
  const socklen_t len = Addr("10.96.0.20:80").ToSockaddr(&ss);
  for (int i = 0; i < kConns; ++i) {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int small = 4096;  // before connect, so the window starts small
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0)
        << i << ": " << strerror(errno);
    clients.push_back(std::move(fd));
  }
  // Every backend has written what the path can hold; sample the agent while they stall.
  ASSERT_TRUE(WaitFor([&] { return backend->accepted() == kConns; }, absl::Seconds(60)))
      << backend->accepted();
  int64_t rss_peak = rss_before;
  for (int i = 0; i < 10; ++i) {
    rss_peak = std::max(rss_peak, RssKib(agent_->pid()));
    absl::SleepFor(absl::Milliseconds(100));
  }
  RecordProperty("agent_rss_growth_kib", absl::StrCat(rss_peak - rss_before));
  RecordProperty("agent_fds_with_stalled_connections",
                 absl::StrCat(OpenFds(agent_->pid()) - fds_before));
  EXPECT_LT(rss_peak - rss_before, kRssGrowthLimitKib);
  EXPECT_GE(MetricValue("sluice_connections_active"), kConns);

  std::string want(kBytes, '\0');
  testutil::FillStream(7, 0, want.data(), want.size());
  const uint64_t want_hash = testutil::Fnv64(testutil::kFnvBasis, want.data(), want.size());
  for (int i = 0; i < kConns; ++i) {
    int big = 1 << 20;
    setsockopt(clients[i].get(), SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    timeval tv{10, 0};
    setsockopt(clients[i].get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint64_t hash = 0;
    int err = 0;
    ASSERT_EQ(testutil::ReadAllHashed(clients[i].get(), &hash, &err), kBytes)
        << i << ": " << strerror(err);
    ASSERT_EQ(hash, want_hash) << i;
  }
  clients.clear();
  EXPECT_TRUE(
      WaitFor([&] { return MetricValue("sluice_connections_active") == 0; }, absl::Seconds(20)));
  // Idle pipes stay pooled: at most PipePool's max_idle (256) per worker, two fds each.
  EXPECT_TRUE(WaitFor([&] { return OpenFds(agent_->pid()) <= fds_before + 2 * 2 * 256; },
                      absl::Seconds(10)))
      << OpenFds(agent_->pid()) << " fds, " << fds_before << " before";
}

// Out of descriptors when a service is added: the data path's connections have spent its
// share (--fd-reserve keeps the rest for the control plane), so new connections are shed, but
// the file source still reads the new manifest; the new service is served once descriptors
// free up (its listener, if the budget had no room for it, is reported and retried). The
// established connections keep working throughout. (The file source's own EMFILE handling, a
// directory it cannot list is not an empty one: ManifestSetTest. Lowering the limit of the running
// agent to its count of open descriptors, as this test once did, left a free number below the limit
// whenever a lower descriptor had closed: the kernel allocates by number.)
TEST_P(NodeFaultTest, ServiceAddedWhileOutOfFdsIsServedOnceFdsFree) {
  auto echo = TcpServer::Start(Addr("127.0.0.2:9000"), TcpServer::Mode::kEcho);
  auto b = TcpServer::Start(Addr("127.0.0.3:8080"), TcpServer::Mode::kHello, 0, "b");
  ASSERT_TRUE(echo && b);
  Write("echo.yaml", ServiceYaml("echo", {"10.96.0.20"}, {{"tcp", 80}}) + "---\n" +
                         SliceYaml("echo", {"127.0.0.2"}, {{"tcp", 9000}}));
  // 300 descriptors, 100 of them the control plane's: the data path may hold 200.
  StartAgent({"--workers=1", "--fd-reserve=100"}, {"prlimit", "--nofile=300", "--"});
  ASSERT_TRUE(WaitListener("tcp/10.96.0.20:80"));
  std::vector<base::UniqueFd> open;
  auto echoes = [](int fd, char c) {
    return send(fd, &c, 1, MSG_NOSIGNAL) == 1 && recv(fd, &c, 1, 0) == 1;
  };
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i) {
    int err = 0;
    auto fd = ConnectTcp(Addr("10.96.0.20:80"), &err);
    if (fd && echoes(fd.get(), 'x')) {
      open.push_back(std::move(fd));
    } else {
      refused = true;
    }
  }
  ASSERT_TRUE(refused) << "new connections kept getting through";
  ASSERT_GT(open.size(), 50u);
  EXPECT_GT(MetricValue("sluice_connections_shed_total"), 0);

  Write("b.yaml", ServiceYaml("b", {"10.96.0.21"}, {{"http", 80}}) + "---\n" +
                      SliceYaml("b", {"127.0.0.3"}, {{"http", 8080}}));
  // The control plane read it (from its reserve) while the data path was out of descriptors:
  // the table has it, with a listener or the reason it has none yet.
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string json = Get("/debug/services");
        return json.find("\"test/b\"") != std::string::npos &&
               (json.find("\"tcp/10.96.0.21:80\"") != std::string::npos ||
                json.find("listen tcp/10.96.0.21:80 failed") != std::string::npos);
      },
      absl::Seconds(10)))
      << Get("/debug/services") << agent_->Output();
  for (auto& fd : open) {  // the established ones still work
    ASSERT_TRUE(echoes(fd.get(), 'y'));
  }

  open.clear();  // frees two of the agent's descriptors per connection
  EXPECT_TRUE(WaitListener("tcp/10.96.0.21:80", true, absl::Seconds(20))) << agent_->Output();
  EXPECT_TRUE(WaitFor([&] { return Hello("10.96.0.21:80") == "b"; }, absl::Seconds(10)));
  // The echo service was never dropped.
  EXPECT_EQ(agent_->Output().find("loaded 0 services"), std::string::npos) << agent_->Output();
  EXPECT_EQ(VipCount("10.96.0.20"), 1);
  auto again = Connect("10.96.0.20:80");
  EXPECT_TRUE(echoes(again.get(), 'z'));
}

}  // namespace
}  // namespace sluice::testing
