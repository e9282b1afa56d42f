// SPDX-License-Identifier: Apache-2.0
// SocketLb on the real kernel, below the agent: the programs attach to a test cgroup this
// process is moved into (never the machine's root), in a private network namespace, pinned to
// a private bpffs. Without CAP_BPF/CAP_NET_ADMIN or cgroup v2 they skip.
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/unique_fd.h"
#include "lib/net/socket.h"
#include <bpf/bpf.h>

#include "agent/dataplane/socklb/probe.h"
#include "agent/dataplane/socklb/socket_lb.h"
#include "bpf/include/sluice/bpf_abi.h"
#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::socklb {
namespace {

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

class SocketLbKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root";
    }
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    netns_ = std::move(*ns);
    auto cg = testutil::TestCgroup::Create();
    if (!cg.ok()) {
      GTEST_SKIP() << "no test cgroup: " << cg.status();
    }
    cgroup_ = std::move(*cg);
    if (auto probe = Create(false); !probe.ok()) {
      GTEST_SKIP() << "socket-level balancing unavailable here: " << probe.status();
    }
    auto fs = testutil::TestBpfFs::Create();
    ASSERT_TRUE(fs.ok()) << fs.status();
    bpffs_ = std::move(*fs);
    backend_ = testutil::TcpServer::Start(Addr("127.0.0.2:8080"), testutil::TcpServer::Mode::kHello,
                                          0, "be");
    ASSERT_TRUE(backend_);
  }
  void TearDown() override {
    backend_.reset();
    bpffs_.reset();
    cgroup_.reset();
    netns_.reset();
  }
  absl::StatusOr<std::unique_ptr<SocketLb>> Create(bool pin, uint32_t max_frontends = 65536) {
    return SocketLb::Create({.cgroup = cgroup_->path(),
                             .bpf_root = pin ? bpffs_->path() : "",
                             .max_frontends = max_frontends});
  }
  // A service `name` at 127.255.0.N:80 with the backend.
  static Change Svc(int n) {
    return {absl::StrCat("svc", n),
            Service{.frontends = {{Addr(absl::StrCat("127.255.0.", n, ":80"))}},
                    .backends = {Addr("127.0.0.2:8080")}}};
  }
  // Whether a connect to 127.255.0.N:80 reaches the backend (nothing listens there itself).
  static bool Translated(int n) {
    int err = 0;
    auto fd = testutil::ConnectTcp(Addr(absl::StrCat("127.255.0.", n, ":80")), &err);
    char buf[4];
    return fd && recv(fd.get(), buf, sizeof(buf), 0) == 2;
  }

  // A blocking UDP socket (bound to `at` if given) whose receives give up after 5 s.
  static base::UniqueFd Udp(std::optional<net::SocketAddress> at = std::nullopt) {
    base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const timeval tv{.tv_sec = 5, .tv_usec = 0};
    sockaddr_storage ss;
    if (!fd || setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        (at && bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), at->ToSockaddr(&ss)) != 0)) {
      return base::UniqueFd();
    }
    return fd;
  }
  static bool SendTo(int fd, const net::SocketAddress& to) {
    sockaddr_storage ss;
    const socklen_t len = to.ToSockaddr(&ss);
    return sendto(fd, "q", 1, 0, reinterpret_cast<sockaddr*>(&ss), len) == 1;
  }
  // The source of the next datagram on `fd`.
  static std::optional<net::SocketAddress> RecvFrom(int fd) {
    char c;
    sockaddr_storage from;
    socklen_t len = sizeof(from);
    if (recvfrom(fd, &c, 1, 0, reinterpret_cast<sockaddr*>(&from), &len) != 1) {
      return std::nullopt;
    }
    return net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), len);
  }

  std::unique_ptr<testutil::NetNs> netns_;
  std::unique_ptr<testutil::TestCgroup> cgroup_;
  std::unique_ptr<testutil::TestBpfFs> bpffs_;
  std::unique_ptr<testutil::TcpServer> backend_;
};

TEST_F(SocketLbKernelTest, SelfTestPasses) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  absl::Status st = SelfTest(**lb);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_TRUE((*lb)->Frontends().empty());  // the self-test's services are gone again
}

TEST_F(SocketLbKernelTest, UnpinnedDetachesWithTheObject) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  ASSERT_TRUE((*lb)->Apply({Svc(1)}).ok());
  EXPECT_TRUE(Translated(1));
  EXPECT_EQ((*lb)->Counters()["svc1"].translated, 1u);
  lb->reset();
  EXPECT_FALSE(Translated(1));
}

// A restarted agent: the pinned hooks translate while no SocketLb exists, the next one adopts
// them, and its first complete programming (ApplyAll) removes what it no longer programs.
TEST_F(SocketLbKernelTest, PinnedStateSurvivesIsAdoptedAndSwept) {
  auto first = Create(true);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE((*first)->adopted());
  ASSERT_TRUE((*first)->Apply({Svc(1), Svc(2)}).ok());
  first->reset();
  EXPECT_TRUE(Translated(1));
  EXPECT_TRUE(Translated(2));

  auto second = Create(true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->adopted());
  EXPECT_TRUE(Translated(2));  // the adopted state serves until the first sync
  ASSERT_TRUE((*second)->Apply({Svc(1), Svc(3)}).ok());
  EXPECT_TRUE(Translated(2));  // a change list says nothing of the others
  ASSERT_TRUE((*second)->ApplyAll({{"svc1", *Svc(1).second}, {"svc3", *Svc(3).second}}).ok());
  EXPECT_TRUE(Translated(1));
  EXPECT_FALSE(Translated(2));
  EXPECT_TRUE(Translated(3));
  second->reset();

  ASSERT_TRUE(SocketLb::Cleanup(bpffs_->path()).ok());
  // Unpinned, the links detach once the kernel frees the bpffs inodes (after an RCU grace
  // period, from a workqueue): moments later, not within unlink().
  EXPECT_TRUE(testutil::WaitFor([] { return !Translated(1); }, absl::Seconds(10)));
}

// Pinned state is never left translating with maps nobody updates: an agent whose socket LB
// ends up off (here the probe fails: not a cgroup v2 directory) detaches the hooks an earlier
// one pinned, even while something else holds a link open, and removes the pins.
TEST_F(SocketLbKernelTest, AProbeEndingOffDetachesAndRemovesPinnedState) {
  auto first = Create(true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Apply({Svc(1)}).ok());
  first->reset();
  ASSERT_TRUE(Translated(1));
  // A hung earlier agent or a bpftool: a link fd that would keep an unpinned hook attached.
  base::UniqueFd held(bpf_obj_get((bpffs_->path() + "/link_sluice_connect4").c_str()));
  ASSERT_TRUE(held);

  ProbeResult probe = ProbeSocketLb({.cgroup = bpffs_->path(), .bpf_root = bpffs_->path()});
  EXPECT_EQ(probe.lb, nullptr);
  EXPECT_EQ(probe.reason, "cgroup") << probe.status;
  EXPECT_FALSE(Translated(1));  // detached now, not once the last reference goes
  int ours = 0;
  for (const auto& e : std::filesystem::directory_iterator(bpffs_->path())) {
    ours += e.path().filename().string().rfind("sluice", 0) == 0 ||
            e.path().filename().string().rfind("link_", 0) == 0;
  }
  EXPECT_EQ(ours, 0);
}

// Maps pinned by an agent with other sizes (or another layout) cannot be reused: the next one
// starts with fresh maps, and its programs replace the old ones in the pinned links.
TEST_F(SocketLbKernelTest, IncompatiblePinnedMapsAreReplaced) {
  auto first = Create(true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Apply({Svc(1)}).ok());
  first->reset();
  auto second = Create(true, 1024);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(Translated(1));  // fresh maps, the old programs replaced
  ASSERT_TRUE((*second)->Apply({Svc(1)}).ok());
  EXPECT_TRUE(Translated(1));
}

// What recvmsg and getpeername report back lives in the translated socket itself: one pair
// in a connected socket, up to SLUICE_LB_PAIRS in an unconnected UDP one.
TEST_F(SocketLbKernelTest, TheReverseTranslationLivesInTheSocket) {
  auto lb = Create(true);
  ASSERT_TRUE(lb.ok()) << lb.status();
  const net::SocketAddress vip = Addr("127.255.0.53:53");
  ASSERT_TRUE((*lb)
                  ->Apply({Svc(1),
                           {"dns", Service{.frontends = {{vip, true}},
                                           .backends = {Addr("127.0.0.2:5353")}}}})
                  .ok());
  base::UniqueFd conn(bpf_obj_get((bpffs_->path() + "/sluice_lb_conn").c_str()));
  base::UniqueFd dgram(bpf_obj_get((bpffs_->path() + "/sluice_lb_dgram").c_str()));
  ASSERT_TRUE(conn && dgram) << strerror(errno);
  int err = 0;
  auto translated = testutil::ConnectTcp(Addr("127.255.0.1:80"), &err);
  ASSERT_TRUE(translated) << strerror(err);
  sluice_lb_pair pair{};
  int fd = translated.get();
  ASSERT_EQ(bpf_map_lookup_elem(conn.get(), &fd, &pair), 0) << strerror(errno);
  EXPECT_EQ(ntohs(pair.backend.port), 8080);
  EXPECT_EQ(ntohs(pair.front.port), 80);
  sluice_lb_peers peers{};
  EXPECT_NE(bpf_map_lookup_elem(dgram.get(), &fd, &peers), 0);

  base::UniqueFd udp = Udp();
  ASSERT_TRUE(udp && SendTo(udp.get(), vip));
  fd = udp.get();
  ASSERT_EQ(bpf_map_lookup_elem(dgram.get(), &fd, &peers), 0) << strerror(errno);
  EXPECT_EQ(peers.next, 1u);
  EXPECT_EQ(ntohs(peers.pair[0].backend.port), 5353);
  EXPECT_EQ(ntohs(peers.pair[0].front.port), 53);
  EXPECT_NE(bpf_map_lookup_elem(conn.get(), &fd, &pair), 0);

  auto direct = testutil::ConnectTcp(Addr("127.0.0.2:8080"), &err);
  ASSERT_TRUE(direct) << strerror(err);
  fd = direct.get();
  EXPECT_NE(bpf_map_lookup_elem(conn.get(), &fd, &pair), 0);  // not translated: nothing kept
}

// The attack: a loop of socket(); sendto(service); close() used to fill the node-wide
// reverse LRU (131,072 entries) with dead sockets' entries and evict a waiting socket's, whose
// reply then came from the backend (and was dropped by glibc's and musl's resolvers).
TEST_F(SocketLbKernelTest, AFloodOfShortLivedSocketsLeavesAPendingReplyFromTheService) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  const net::SocketAddress vip = Addr("127.255.0.53:53");
  ASSERT_TRUE((*lb)
                  ->Apply({{"dns", Service{.frontends = {{vip, true}},
                                           .backends = {Addr("127.0.0.2:5353")}}}})
                  .ok());
  base::UniqueFd backend = Udp(Addr("127.0.0.2:5353"));
  base::UniqueFd victim = Udp();
  ASSERT_TRUE(backend && victim);
  ASSERT_TRUE(SendTo(victim.get(), vip));
  auto asker = RecvFrom(backend.get());  // the query waits on a slow upstream
  ASSERT_TRUE(asker);
  constexpr int kFlood = 300000;  // over twice the old map's size
  for (int i = 0; i < kFlood; ++i) {
    base::UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(s && SendTo(s.get(), vip)) << "datagram " << i << ": " << strerror(errno);
  }
  ASSERT_TRUE(SendTo(backend.get(), *asker));
  auto from = RecvFrom(victim.get());
  ASSERT_TRUE(from);
  EXPECT_EQ(from->ToString(), vip.ToString());
}

// An unconnected socket's datagrams to one service go to several backends (round-robin): each
// reply shows the service. A socket remembers SLUICE_LB_PAIRS backends: with one more out at
// once, the reply of the one it sent to first shows that backend.
TEST_F(SocketLbKernelTest, RepliesFromSeveralBackendsShowTheServiceUpToTheBound) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  const net::SocketAddress vip = Addr("127.255.0.53:53");
  Service svc{.frontends = {{vip, true}}};
  std::vector<base::UniqueFd> backends;
  for (int i = 1; i <= SLUICE_LB_PAIRS + 1; ++i) {
    svc.backends.push_back(Addr(absl::StrCat("127.0.1.", i, ":5353")));
    backends.push_back(Udp(svc.backends.back()));
    ASSERT_TRUE(backends.back());
  }
  ASSERT_TRUE((*lb)->Apply({{"dns", svc}}).ok());
  base::UniqueFd client = Udp();
  std::vector<net::SocketAddress> askers;
  for (const auto& b : backends) {  // round-robin in list order: one datagram each
    ASSERT_TRUE(SendTo(client.get(), vip));
    auto asker = RecvFrom(b.get());
    ASSERT_TRUE(asker);
    askers.push_back(*asker);
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    ASSERT_TRUE(SendTo(backends[i].get(), askers[i]));
    auto from = RecvFrom(client.get());
    ASSERT_TRUE(from);
    EXPECT_EQ(from->ToString(), (i == 0 ? svc.backends[0] : vip).ToString()) << "reply " << i;
  }
}

// An agent of the version before socket storage pinned a node-wide reverse LRU and a
// sock_release hook deleting from it: the next agent starts, adopts the rest, copies what
// connected sockets have in the LRU into their storage, and unpins both.
TEST_F(SocketLbKernelTest, AnUpgradeFromTheReverseLruKeepsConnectedSocketsAndUnpinsIt) {
  auto first = Create(true);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Apply({Svc(1)}).ok());
  first->reset();
  // Sockets that version translated: connected to a backend, their pairs in its LRU.
  int err = 0;
  auto tcp = testutil::ConnectTcp(Addr("127.0.0.2:8080"), &err);
  base::UniqueFd udp = Udp();
  const net::SocketAddress vip = Addr("127.255.0.53:53"), udp_backend = Addr("127.0.0.2:5353");
  sockaddr_storage ss;
  ASSERT_TRUE(tcp && udp &&
              connect(udp.get(), reinterpret_cast<sockaddr*>(&ss), udp_backend.ToSockaddr(&ss)) ==
                  0);
  auto pair = [](int fd, const char* backend, const char* front) {
    auto v4 = [](const net::SocketAddress& a) {
      sluice_lb_addr out{.port = htons(a.port())};
      out.addr[10] = out.addr[11] = 0xff;
      std::memcpy(out.addr + 12, a.ip().bytes(), 4);
      return out;
    };
    sluice_lb_rev key{.backend = v4(Addr(backend))};
    socklen_t len = sizeof(key.cookie);
    getsockopt(fd, SOL_SOCKET, SO_COOKIE, &key.cookie, &len);
    return std::pair(key, v4(Addr(front)));
  };
  const std::string map_pin = bpffs_->path() + "/sluice_lb_rev";
  const std::string link_pin = bpffs_->path() + "/link_sluice_release";
  base::UniqueFd cgroup(open(cgroup_->path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(cgroup);
  {
    base::UniqueFd map(
        bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "sluice_lb_rev", 32, 20, 1024, nullptr));
    ASSERT_TRUE(map) << strerror(errno);
    for (auto [key, front] : {pair(tcp.get(), "127.0.0.2:8080", "127.255.0.1:80"),
                              pair(udp.get(), "127.0.0.2:5353", "127.255.0.53:53")}) {
      ASSERT_EQ(bpf_map_update_elem(map.get(), &key, &front, BPF_ANY), 0) << strerror(errno);
    }
    const bpf_insn accept[] = {{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 1},
                               {.code = BPF_JMP | BPF_EXIT}};
    LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_CGROUP_INET_SOCK_RELEASE);
    base::UniqueFd prog(
        bpf_prog_load(BPF_PROG_TYPE_CGROUP_SOCK, "sluice_release", "GPL", accept, 2, &opts));
    base::UniqueFd link(
        bpf_link_create(prog.get(), cgroup.get(), BPF_CGROUP_INET_SOCK_RELEASE, nullptr));
    ASSERT_TRUE(prog && link) << strerror(errno);
    ASSERT_EQ(bpf_obj_pin(map.get(), map_pin.c_str()), 0);
    ASSERT_EQ(bpf_obj_pin(link.get(), link_pin.c_str()), 0);
  }
  auto second = Create(true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->adopted());
  EXPECT_TRUE(Translated(1));
  EXPECT_NE(access(map_pin.c_str(), F_OK), 0);
  EXPECT_NE(access(link_pin.c_str(), F_OK), 0);
  auto peer = net::PeerAddress(tcp.get());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->ToString(), "127.255.0.1:80");
  if ((*second)->can_reap()) {  // the UDP one is closed when its backend leaves the service
    Service dns{.frontends = {{vip, true}}, .backends = {udp_backend}};
    ASSERT_TRUE((*second)->Apply({{"dns", dns}}).ok());
    ASSERT_TRUE((*second)->Apply({{"dns", std::nullopt}}).ok());
    char c;
    EXPECT_EQ(recv(udp.get(), &c, 1, MSG_DONTWAIT), -1);
    EXPECT_EQ(errno, ECONNABORTED);
  }
  auto release_hooks = [&] {
    uint32_t count = 0;
    return bpf_prog_query(cgroup.get(), BPF_CGROUP_INET_SOCK_RELEASE, 0, nullptr, nullptr,
                          &count) == 0
               ? count
               : 1u;
  };
  // The unpinned link detaches once the kernel frees the inode (after an RCU grace period).
  EXPECT_TRUE(testutil::WaitFor([&] { return release_hooks() == 0; }, absl::Seconds(10)));
}

// The reaper's map holds 4,096 (frontend, backend) pairs; a change that ends more (here one
// service with 4,100 UDP backends removed) is walked in batches, so a connected socket whose
// pair comes after the first 4,096 is closed too (it used to be dropped).
TEST_F(SocketLbKernelTest, ARemovalPastTheReapersMapSizeClosesEverySocket) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  if (!(*lb)->can_reap()) {
    GTEST_SKIP() << "no bpf_sock_destroy on this kernel";
  }
  const net::SocketAddress vip = Addr("127.255.0.53:53");
  Service svc{.frontends = {{vip, true}}};
  constexpr int kBackends = 4100;
  for (int i = 0; i < kBackends; ++i) {
    svc.backends.push_back(Addr(absl::StrCat("127.0.0.2:", 20000 + i)));
  }
  ASSERT_TRUE((*lb)->Apply({{"dns", svc}}).ok());
  sockaddr_storage ss;
  const socklen_t len = vip.ToSockaddr(&ss);
  base::UniqueFd victim;
  for (int i = 0; i < kBackends; ++i) {  // round-robin: the last connect gets the last backend
    victim = Udp();                      // closes the previous one
    ASSERT_EQ(connect(victim.get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << strerror(errno);
  }
  ASSERT_TRUE((*lb)->Apply({{"dns", std::nullopt}}).ok());
  EXPECT_EQ((*lb)->reaped(), 1u);  // the others were closed by the loop
  char c;
  EXPECT_EQ(recv(victim.get(), &c, 1, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, ECONNABORTED);
}

TEST_F(SocketLbKernelTest, ABackendSetSwapLeavesNoGap) {
  auto lb = Create(false);
  ASSERT_TRUE(lb.ok()) << lb.status();
  auto other = testutil::TcpServer::Start(Addr("127.0.0.3:8080"), testutil::TcpServer::Mode::kHello,
                                          0, "ot");
  ASSERT_TRUE(other);
  Change svc = Svc(1);
  ASSERT_TRUE((*lb)->Apply({svc}).ok());
  // Swap the set back and forth while connecting: every connect lands on one of them.
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, ok{0};
  std::thread client([&] {
    while (!stop) {
      (Translated(1) ? ok : failed)++;
    }
  });
  for (int i = 0; i < 200; ++i) {
    svc.second->backends = {Addr(i % 2 ? "127.0.0.2:8080" : "127.0.0.3:8080")};
    ASSERT_TRUE((*lb)->Apply({svc}).ok());
  }
  stop = true;
  client.join();
  EXPECT_EQ(failed, 0) << ok << " succeeded";
}

// Many services at once go to the kernel in BPF_MAP_UPDATE_BATCH calls: every one is served;
// when the frontend map fills in the middle of a batch, those that fit are served, the write
// that did not fit is reported, and the rest of the batch is not lost to it.
TEST_F(SocketLbKernelTest, ManyServicesAtOnceAreBatchedAndAFullMapStopsOnlyWhatDoesNotFit) {
  {
    auto lb = Create(false);
    ASSERT_TRUE(lb.ok()) << lb.status();
    std::map<std::string, Service> all;
    for (int n = 1; n <= 200; ++n) {
      auto [name, service] = Svc(n);
      all.emplace(name, *service);
    }
    ASSERT_TRUE((*lb)->ApplyAll(all).ok());
    for (int n : {1, 99, 200}) {
      EXPECT_TRUE(Translated(n)) << n;
    }
  }
  auto lb = Create(false, /*max_frontends=*/4);
  ASSERT_TRUE(lb.ok()) << lb.status();
  std::map<std::string, Service> all;
  for (int n = 1; n <= 6; ++n) {
    auto [name, service] = Svc(n);  // "svc1".."svc6": written in that order
    all.emplace(name, *service);
  }
  const absl::Status st = (*lb)->ApplyAll(all);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  for (int n = 1; n <= 4; ++n) {
    EXPECT_TRUE(Translated(n)) << n;
  }
  EXPECT_FALSE(Translated(5));
}

}  // namespace
}  // namespace sluice::socklb
