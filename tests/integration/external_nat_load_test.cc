// SPDX-License-Identifier: Apache-2.0
// The eBPF NAT of remote clients under load (issue 25's load tests), in the three-namespace
// topology of external_nat_topology.h: real clients in the client host keep requesting the
// service's LoadBalancer IPs and NodePorts, both families, while endpoints churn, the agent is
// killed and restarted, or the conntrack table is full. Every request is checked; the tests
// assert outcomes (failures, which backend, which path), never rates.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"

#include "tests/integration/external_nat_topology.h"
#include "tests/testutil/process.h"

namespace sluice::testing {
namespace {

// The load generator, run in the client host: argv[1] a control directory ("phase" holds an
// int read before each request, "stop" ends the run, "status" is written there), argv[2] the
// number of short-request threads, argv[3] the long connections, argv[4:] the targets
// "tcp|udp,ip,port,source address". The long connections are opened one by one over the TCP targets
// in turn (so the Nth flow is the Nth long one), each asks the backend "who" every 50 ms and fails
// on any answer but its first (a changed backend or path). Each short TCP request is an HTTP GET
// /who on a new connection; each UDP one a datagram from a new socket, one answer within 5 s.
// A request's path is "kernel" when the backend saw the client's own address, else "proxy".
// Every failure is counted and printed.
constexpr char kLoad[] = R"(
import os, socket, sys, threading, time
ctl, workers, longs, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
lock = threading.Lock()
ok, fail, short, long_state = 0, 0, {}, []
def phase():
    try:
        with open(os.path.join(ctl, "phase")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0
def stopped():
    return os.path.exists(os.path.join(ctl, "stop"))
def path_of(sock, peer):
    return "kernel" if peer == sock.getsockname()[0] else "proxy"
def tcp(ip, port, src):
    with socket.create_connection((ip, port), timeout=10, source_address=(src, 0)) as s:
        s.sendall(b"GET /who HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.0 200 "):
            raise RuntimeError("answer %r" % data)
        backend, peer = body.decode().split()
        return backend, path_of(s, peer)
def udp(ip, port, src):
    # As a DNS resolver does: a datagram lost on a busy machine is asked again (on the same
    # flow), and only three unanswered tries fail.
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.bind((src, 0))
        s.connect((ip, port))
        for attempt in range(3):
            s.send(b"who")
            try:
                data = s.recv(100).decode()
                break
            except socket.timeout:
                print("retry udp %s %s try %d" % (ip, port, attempt + 1), flush=True)
        else:
            raise TimeoutError("3 tries unanswered")
        backend, peer = data.split()
        return backend, path_of(s, peer)
def failed(what, e):
    global fail
    with lock:
        fail += 1
    print("fail", what, repr(e), flush=True)
def worker(n):
    global ok
    while not stopped():
        kind, ip, port, src = targets[n % len(targets)].split(",")
        n += 1
        ph = phase()
        try:
            backend, path = (tcp if kind == "tcp" else udp)(ip, int(port), src)
        except Exception as e:
            failed("%s %s %s phase %d" % (kind, ip, port, ph), e)
            continue
        with lock:
            ok += 1
            key = (ph, kind, backend, path)
            short[key] = short.get(key, 0) + 1
def run_long(state, s, f, answer):
    try:
        while True:
            done = stopped()
            f.write(b"who\n")
            f.flush()
            got = f.readline()
            if got != answer:
                raise RuntimeError("answer %r after %r" % (got, answer))
            with lock:
                state[4] += 1
            if done:
                break
            time.sleep(0.05)
        s.close()
    except Exception as e:
        failed("long %s" % state[1], e)
        with lock:
            state[5] = 0
def status(done):
    with lock:
        lines = ["ok %d" % ok, "fail %d" % fail]
        lines += ["short %d %s %s %s %d" % (k + (n,)) for k, n in sorted(short.items())]
        lines += ["long %d %s %s %s %d %d" % tuple(st) for st in long_state]
    lines.append("done %d" % done)
    tmp = os.path.join(ctl, ".status")
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, os.path.join(ctl, "status"))
tcp_targets = [t for t in targets if t.startswith("tcp,")]
threads = []
for i in range(longs):
    _, ip, port, src = tcp_targets[i % len(tcp_targets)].split(",")
    state = [i, ip, "-", "-", 0, 0]
    try:
        s = socket.create_connection((ip, int(port)), timeout=10, source_address=(src, 0))
        f = s.makefile("rwb")
        f.write(b"who\n")
        f.flush()
        answer = f.readline()
        backend, peer = answer.decode().split()
        state[2:4] = [backend, path_of(s, peer)]
        state[5] = 1
        threads.append(threading.Thread(target=run_long, args=(state, s, f, answer)))
    except Exception as e:
        failed("long %s open" % ip, e)
    long_state.append(state)
    status(0)
threads += [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    status(0)
    time.sleep(0.1)
status(1)
)";

// The pod's backend addresses (ExternalNatTopology's backend serves them all): A is the
// topology's own, B and C are added here.
constexpr char kA4[] = "10.88.2.1";
constexpr char kB4[] = "10.88.2.3";
constexpr char kC4[] = "10.88.2.4";
constexpr char kA6[] = "fd00:88:2::1";
constexpr char kB6[] = "fd00:88:2::3";
constexpr char kC6[] = "fd00:88:2::4";

// Every TCP frontend of the service: the LoadBalancer IPs and the NodePorts, both families.
// The client reaches the NodePorts from a second address of its own: two of its flows to one
// backend through two frontends never share a client port then, which the kernel leaves to the
// proxy (the backend could not tell them apart) and which with no agent running is refused.
const std::vector<std::string> kTcpTargets = {
    absl::StrCat("tcp,", kLbV4, ",80,10.88.1.1"), absl::StrCat("tcp,", kLbV6, ",80,fd00:88:1::1"),
    "tcp,10.88.1.2,30080,10.88.1.3", "tcp,fd00:88:1::2,30080,fd00:88:1::3"};
const std::vector<std::string> kUdpTargets = {absl::StrCat("udp,", kLbV4, ",53,10.88.1.1"),
                                              absl::StrCat("udp,", kLbV6, ",53,fd00:88:1::1")};

// What the load generator reported last.
struct LoadStatus {
  struct Long {
    std::string target, backend, path;
    int exchanges = 0;
    bool alive = false;
  };
  int ok = 0;
  int failed = 0;
  bool done = false;
  // (phase, "tcp"|"udp", backend, path) -> answered requests.
  std::map<std::tuple<int, std::string, std::string, std::string>, int> requests;
  std::vector<Long> longs;

  // Answered requests of phase `from` or later; an empty filter matches anything.
  int Count(int from, const std::string& kind = "", const std::string& backend = "",
            const std::string& path = "") const {
    int n = 0;
    for (const auto& [key, count] : requests) {
      const auto& [phase, k, b, p] = key;
      if (phase >= from && (kind.empty() || k == kind) && (backend.empty() || b == backend) &&
          (path.empty() || p == path)) {
        n += count;
      }
    }
    return n;
  }
  // Whether every long connection answered at least `n` more times than in `before`.
  bool LongsPast(const LoadStatus& before, int n) const {
    if (longs.size() != before.longs.size()) {
      return false;
    }
    for (size_t i = 0; i < longs.size(); ++i) {
      if (longs[i].exchanges < before.longs[i].exchanges + n) {
        return false;
      }
    }
    return true;
  }
};

// kLoad running in the client host until Stop() (or destruction, which kills it by PID).
// Thread: the test's.
class LoadGenerator final {
 public:
  LoadGenerator(const testutil::PeerHost& client, std::string dir, int workers, int longs,
                const std::vector<std::string>& targets)
      : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    std::vector<std::string> argv = {"python3", "-c", kLoad, dir_};
    argv.push_back(absl::StrCat(workers));
    argv.push_back(absl::StrCat(longs));
    argv.insert(argv.end(), targets.begin(), targets.end());
    process_ = std::make_unique<testutil::Subprocess>(client.Exec(argv));
  }

  // Requests that start from now on count in `phase`.
  void SetPhase(int phase) {
    const std::string tmp = dir_ + "/.phase";
    std::ofstream(tmp) << phase;
    std::filesystem::rename(tmp, dir_ + "/phase");
  }

  LoadStatus Status() const {
    LoadStatus s;
    std::ifstream in(dir_ + "/status");
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string what;
      words >> what;
      if (what == "ok") {
        words >> s.ok;
      } else if (what == "fail") {
        words >> s.failed;
      } else if (what == "done") {
        int done = 0;
        words >> done;
        s.done = done != 0;
      } else if (what == "short") {
        int phase = 0, n = 0;
        std::string kind, backend, path;
        words >> phase >> kind >> backend >> path >> n;
        s.requests[{phase, kind, backend, path}] = n;
      } else if (what == "long") {
        int index = 0, alive = 0;
        LoadStatus::Long l;
        words >> index >> l.target >> l.backend >> l.path >> l.exchanges >> alive;
        l.alive = alive != 0;
        s.longs.push_back(l);
      }
    }
    return s;
  }

  // Waits until `cond` holds of the status (false after `timeout`, or if the generator died).
  bool WaitFor(const std::function<bool(const LoadStatus&)>& cond,
               absl::Duration timeout = absl::Seconds(60)) const {
    bool exited = false;
    return testutil::WaitFor(
               [&] {
                 exited = process_->Wait(absl::ZeroDuration()) != -1;
                 return exited || cond(Status());
               },
               timeout) &&
           !exited;
  }

  // Ends the run: the long connections close after one more exchange each. The final status.
  LoadStatus Stop() {
    std::ofstream(dir_ + "/stop") << "";
    EXPECT_EQ(process_->Wait(absl::Seconds(60)), 0) << process_->Output();
    LoadStatus s = Status();
    EXPECT_TRUE(s.done) << process_->Output();
    return s;
  }

  std::string Output() const { return process_->Output(); }

 private:
  std::string dir_;
  std::unique_ptr<testutil::Subprocess> process_;
};

// The status in failure messages: a line per request count and long connection.
std::string Describe(const LoadStatus& s) {
  std::string out = absl::StrCat("ok ", s.ok, " failed ", s.failed, "\n");
  for (const auto& [key, n] : s.requests) {
    const auto& [phase, kind, backend, path] = key;
    absl::StrAppend(&out, "phase ", phase, " ", kind, " ", backend, " ", path, ": ", n, "\n");
  }
  for (const LoadStatus::Long& l : s.longs) {
    absl::StrAppend(&out, "long to ", l.target, ": ", l.backend, " ", l.path, " ", l.exchanges,
                    l.alive ? "" : " DEAD", "\n");
  }
  return out;
}

class ExternalNatLoadTest : public ExternalNatTopology {
 protected:
  void SetUp() override {
    ExternalNatTopology::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    // The client's second address (kTcpTargets).
    ASSERT_EQ(
        testutil::RunCommand(client_->Exec({"ip", "addr", "add", "10.88.1.3/24", "dev", "nc1"})),
        0);
    ASSERT_EQ(testutil::RunCommand(
                  client_->Exec({"ip", "addr", "add", "fd00:88:1::3/64", "dev", "nc1", "nodad"})),
              0);
  }

  void TearDown() override {
    loads_.clear();  // killed by PID before the client's namespace goes
    ExternalNatTopology::TearDown();
  }

  LoadGenerator& StartLoad(int workers, int longs, const std::vector<std::string>& targets) {
    loads_.push_back(std::make_unique<LoadGenerator>(
        *client_, absl::StrCat(dir_, "/.load", loads_.size()), workers, longs, targets));
    return *loads_.back();
  }

  // Waits until every TCP frontend is in the kernel, and the UDP LoadBalancer IPs.
  bool WaitFrontends() {
    for (const std::string& frontend :
         {absl::StrCat("tcp/", kLbV4, ":80"), absl::StrCat("tcp/[", kLbV6, "]:80"),
          std::string("tcp/10.88.1.2:30080"), std::string("tcp/[fd00:88:1::2]:30080")}) {
      if (!WaitExternal(frontend)) {
        return false;
      }
    }
    return WaitExternal(absl::StrCat("udp/", kLbV4, ":53"), "dns") &&
           WaitExternal(absl::StrCat("udp/[", kLbV6, "]:53"), "dns");
  }

  // Waits until /debug/services, which shows a table once every consumer (the kernel's maps
  // included) applied it, names the `present` endpoints and none of the `absent`.
  bool WaitEndpoints(const std::vector<std::string>& present,
                     const std::vector<std::string>& absent) {
    return testutil::WaitFor(
        [&] {
          const std::string json = Get("/debug/services");
          for (const std::string& ip : present) {
            if (json.find("\"" + ip + ":") == std::string::npos &&
                json.find("\"[" + ip + "]:") == std::string::npos) {
              return false;
            }
          }
          for (const std::string& ip : absent) {
            if (json.find(ip) != std::string::npos) {
              return false;
            }
          }
          return !json.empty();
        },
        absl::Seconds(20));
  }

  // The service with endpoints A and B of each family, served in the kernel.
  void StartWithTwoBackends() {
    // Backends B and C: more addresses of the pod, served by its one backend process.
    for (const char* address : {"10.88.2.3/24", "10.88.2.4/24"}) {
      ASSERT_EQ(testutil::RunCommand(pod_->Exec({"ip", "addr", "add", address, "dev", "np1"})), 0);
    }
    for (const char* address : {"fd00:88:2::3/64", "fd00:88:2::4/64"}) {
      ASSERT_EQ(
          testutil::RunCommand(pod_->Exec({"ip", "addr", "add", address, "dev", "np1", "nodad"})),
          0);
    }
    StartAgent(Flags("bpf"));
    WriteService("Cluster");
    WriteSlices({kA4, kB4}, {kA6, kB6});
    ASSERT_TRUE(WaitFrontends()) << Get("/debug/services");
    ASSERT_TRUE(WaitEndpoints({kA4, kB4, kA6, kB6}, {})) << Get("/debug/services");
  }

  double FlowsTotal() {
    return MetricValue("sluice_external_nat_flows_total{service_port=\"test/lb:http\"}");
  }

  std::vector<std::unique_ptr<LoadGenerator>> loads_;
};

// The end of a load run: no request failed, and every long connection of `start` is alive,
// on the backend it started with, through the kernel.
void ExpectNoFailureLongsKept(LoadGenerator& load, const LoadStatus& start, const LoadStatus& end) {
  EXPECT_EQ(end.failed, 0) << Describe(end) << load.Output();
  ASSERT_EQ(end.longs.size(), start.longs.size()) << Describe(end);
  for (size_t i = 0; i < end.longs.size(); ++i) {
    EXPECT_TRUE(end.longs[i].alive) << i << "\n" << Describe(end);
    EXPECT_EQ(end.longs[i].backend, start.longs[i].backend) << i;
    EXPECT_EQ(end.longs[i].path, "kernel") << i;
  }
}

// Endpoints removed and added while short requests (TCP to every frontend, UDP to the
// LoadBalancer IPs) and long connections run: no request fails; each long connection keeps its
// backend, also one whose backend left the set; once the kernel has the new set (what
// /debug/services shows is applied), no new flow reaches a removed backend and an added one gets
// some.
TEST_F(ExternalNatLoadTest, EndpointChurnUnderLoad) {
  StartWithTwoBackends();
  std::vector<std::string> targets = kTcpTargets;
  targets.insert(targets.end(), kUdpTargets.begin(), kUdpTargets.end());
  LoadGenerator& load = StartLoad(/*workers=*/4, /*longs=*/4, targets);
  ASSERT_TRUE(load.WaitFor([](const LoadStatus& s) { return s.longs.size() == 4 && s.ok >= 40; }))
      << Describe(load.Status()) << load.Output();
  // Per family, the backend that holds the LoadBalancer IP's long connection leaves (long 0
  // is to the IPv4 LoadBalancer IP, long 1 to the IPv6 one).
  const LoadStatus start = load.Status();
  const std::string gone4 = start.longs[0].backend;
  const std::string gone6 = start.longs[1].backend;
  ASSERT_TRUE(gone4 == kA4 || gone4 == kB4) << Describe(start);
  ASSERT_TRUE(gone6 == kA6 || gone6 == kB6) << Describe(start);
  const std::string kept4 = gone4 == kA4 ? kB4 : kA4;
  const std::string kept6 = gone6 == kA6 ? kB6 : kA6;

  WriteSlices({kept4}, {kept6});
  ASSERT_TRUE(WaitEndpoints({kept4, kept6}, {gone4, gone6})) << Get("/debug/services");
  load.SetPhase(1);
  ASSERT_TRUE(load.WaitFor([](const LoadStatus& s) {
    return s.Count(1, "tcp") >= 40 && s.Count(1, "udp") >= 10;
  })) << Describe(load.Status())
      << load.Output();

  WriteSlices({kept4, kC4}, {kept6, kC6});
  ASSERT_TRUE(WaitEndpoints({kept4, kC4, kept6, kC6}, {gone4, gone6})) << Get("/debug/services");
  load.SetPhase(2);
  const LoadStatus added = load.Status();
  ASSERT_TRUE(load.WaitFor([&](const LoadStatus& s) {
    for (const char* kind : {"tcp", "udp"}) {
      if (s.Count(2, kind, kC4, "kernel") == 0 || s.Count(2, kind, kC6, "kernel") == 0) {
        return false;
      }
    }
    return s.LongsPast(added, 5);
  })) << Describe(load.Status())
      << load.Output();

  const LoadStatus end = load.Stop();
  ExpectNoFailureLongsKept(load, start, end);
  // The kernel carried every flow: a set swap never leaves a frontend without backends.
  EXPECT_EQ(end.Count(0, "", "", "proxy"), 0) << Describe(end);
  for (const char* kind : {"tcp", "udp"}) {
    EXPECT_EQ(end.Count(1, kind, gone4), 0) << kind << "\n" << Describe(end);
    EXPECT_EQ(end.Count(1, kind, gone6), 0) << kind << "\n" << Describe(end);
    EXPECT_GT(end.Count(1, kind, kept4), 0) << kind << "\n" << Describe(end);
    EXPECT_GT(end.Count(1, kind, kept6), 0) << kind << "\n" << Describe(end);
  }
}

// kill -9 under load, then a new agent on the same bpf root: the pinned programs and maps go on
// translating while no agent runs (no request fails, and nothing else could serve them), the
// long connections go on, and the new agent adopts the maps and counts the flows it sees.
TEST_F(ExternalNatLoadTest, AgentKillAndRestartUnderLoad) {
  StartWithTwoBackends();
  LoadGenerator& load = StartLoad(/*workers=*/4, /*longs=*/4, kTcpTargets);
  ASSERT_TRUE(load.WaitFor([](const LoadStatus& s) { return s.longs.size() == 4 && s.ok >= 40; }))
      << Describe(load.Status()) << load.Output();
  const LoadStatus start = load.Status();

  agent_->Signal(SIGKILL);
  ASSERT_EQ(agent_->Wait(absl::Seconds(10)), 128 + SIGKILL);
  load.SetPhase(1);
  const LoadStatus killed = load.Status();
  ASSERT_TRUE(load.WaitFor([&](const LoadStatus& s) {
    return s.Count(1, "tcp") >= 40 && s.LongsPast(killed, 5);
  })) << Describe(load.Status())
      << load.Output();

  StartAgent(Flags("bpf"));
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return agent_->Output().find("adopted the pinned maps") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->Output();
  ASSERT_TRUE(WaitFrontends()) << Get("/debug/services");
  ASSERT_TRUE(WaitEndpoints({kA4, kB4, kA6, kB6}, {})) << Get("/debug/services");
  const double flows_before = FlowsTotal();
  load.SetPhase(2);
  const LoadStatus restarted = load.Status();
  ASSERT_TRUE(load.WaitFor([&](const LoadStatus& s) {
    return s.Count(2, "tcp", "", "kernel") >= 40 && s.LongsPast(restarted, 5);
  })) << Describe(load.Status())
      << load.Output();

  const LoadStatus end = load.Stop();
  ExpectNoFailureLongsKept(load, start, end);
  EXPECT_EQ(end.Count(0, "", "", "proxy"), 0) << Describe(end);
  // Every kernel flow of phase 2 began after flows_before was read.
  EXPECT_GE(FlowsTotal() - flows_before, end.Count(2, "tcp", "", "kernel")) << Describe(end);
}

// A conntrack table of 8 flows (--external-max-flows=16 entries): of 12 long connections opened
// one by one the first 8 are translated and the rest served by the proxy; while it is full
// every new TCP and UDP flow is the proxy's, none fails, and each is counted as conntrack_full.
// Once the flows end and age out (closed TCP flows after the fixed 10 s, extnat::kTcpClosedAge;
// UDP's age shortened by --conntrack-udp-timeout), new flows are translated again.
TEST_F(ExternalNatLoadTest, ConntrackFullFallsBackToTheProxy) {
  constexpr int kFlows = 8;
  std::vector<std::string> flags = Flags("bpf");
  flags.insert(flags.end(),
               {absl::StrCat("--external-max-flows=", 2 * kFlows), "--conntrack-udp-timeout=2s"});
  StartAgent(flags);
  WriteService("Cluster");
  ASSERT_TRUE(WaitFrontends()) << Get("/debug/services");
  const std::vector<std::string> lb_targets = {kTcpTargets[0], kTcpTargets[1]};

  LoadGenerator& longs = StartLoad(/*workers=*/0, /*longs=*/kFlows + 4, lb_targets);
  ASSERT_TRUE(longs.WaitFor([](const LoadStatus& s) { return s.longs.size() == kFlows + 4; }))
      << Describe(longs.Status()) << longs.Output();
  const LoadStatus full = longs.Status();
  for (int i = 0; i < kFlows + 4; ++i) {
    EXPECT_EQ(full.longs[i].path, i < kFlows ? "kernel" : "proxy") << i << "\n" << Describe(full);
  }
  // Two entries per flow, as the ageing pass counts them.
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return MetricValue("sluice_external_nat_conntrack_entries") == 2 * kFlows; },
      absl::Seconds(30)))
      << Metrics();

  LoadGenerator& shorts = StartLoad(/*workers=*/4, /*longs=*/0, [] {
    std::vector<std::string> all = kTcpTargets;
    all.insert(all.end(), kUdpTargets.begin(), kUdpTargets.end());
    return all;
  }());
  ASSERT_TRUE(shorts.WaitFor([](const LoadStatus& s) {
    return s.Count(0, "tcp") >= 40 && s.Count(0, "udp") >= 10;
  })) << Describe(shorts.Status())
      << shorts.Output();
  const LoadStatus served = shorts.Stop();
  EXPECT_EQ(served.failed, 0) << Describe(served) << shorts.Output();
  EXPECT_EQ(served.Count(0, "", "", "kernel"), 0) << Describe(served);
  EXPECT_GE(MetricValue("sluice_external_nat_drops_total{reason=\"conntrack_full\"}"),
            served.ok + 4)
      << Metrics();

  const LoadStatus ended = longs.Stop();
  EXPECT_EQ(ended.failed, 0) << Describe(ended) << longs.Output();
  ASSERT_TRUE(testutil::WaitFor(
      [&] { return MetricValue("sluice_external_nat_conntrack_entries") == 0; }, absl::Seconds(60)))
      << Metrics();

  // Room again: new long connections are translated, and so are the short TCP and UDP flows
  // that find room beside them (each worker's first three requests include both).
  LoadGenerator& again = StartLoad(/*workers=*/2, /*longs=*/kFlows / 2, [&] {
    std::vector<std::string> all = lb_targets;
    all.insert(all.end(), kUdpTargets.begin(), kUdpTargets.end());
    return all;
  }());
  ASSERT_TRUE(again.WaitFor(
      [](const LoadStatus& s) {
        return s.longs.size() == kFlows / 2 && s.Count(0, "tcp", "", "kernel") > 0 &&
               s.Count(0, "udp", "", "kernel") > 0;
      },
      absl::Seconds(90)))
      << Describe(again.Status()) << again.Output();
  const LoadStatus end = again.Stop();
  EXPECT_EQ(end.failed, 0) << Describe(end) << again.Output();
  for (const LoadStatus::Long& l : end.longs) {
    EXPECT_EQ(l.path, "kernel") << Describe(end);
    EXPECT_TRUE(l.alive) << Describe(end);
  }
}

}  // namespace
}  // namespace sluice::testing
