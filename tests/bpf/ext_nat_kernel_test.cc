// SPDX-License-Identifier: Apache-2.0
// The external-NAT tc programs on the real kernel, below ExtNat: NatObject loads them in the
// test thread's namespace (the node) and attaches them to the client-facing veth; the test
// programs the maps directly (socklb::ServiceMaps over the NAT maps, the range trie by hand).
//
//   client 10.89.1.1 / fd00:89:1::1 ── nc0: node 10.89.1.2 (+ external IPs 10.89.9.9,
//   fd00:89:9::9) | np0: 10.89.2.2 ── pod 10.89.2.1 / fd00:89:2::1
//
// The pod runs TCP backends "a" (8080) and "b" (8081) and UDP ones "a" (5353), "b" (5354), each
// answering a line or datagram with "<name> <peer address> <bytes received>", and a UDP backend
// on 5355 that answers "first" on a socket connected to the client, then, when a datagram to
// 5356 asks, sends "late" there and answers the asker whether that was refused (ICMP port
// unreachable). Clients are sockets made in the client's namespace by the test thread.
#include <fcntl.h>
#include <linux/if_ether.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/log.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/dataplane/extnat/flow_table.h"
#include "agent/dataplane/extnat/nat_object.h"
#include "agent/dataplane/fastpath/bpf_map.h"
#include "agent/dataplane/socklb/service_maps.h"
#include "bpf/ext_nat.skel.h"
#include "bpf/include/sluice/bpf_abi.h"
#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"
#include "tests/testutil/tcp_server.h"

namespace sluice::extnat {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kBackends[] = R"(
import socket, sys, threading
def peer(a):
    return a[0][7:] if a[0].startswith("::ffff:") else a[0]
def bound(kind, port):
    s = socket.socket(socket.AF_INET6, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    return s
def conn(name, c, a):
    for line in c.makefile("rb"):
        c.sendall(f"{name} {peer(a)} {len(line)}\n".encode())
def tcp(name, port):
    s = bound(socket.SOCK_STREAM, port)
    s.listen(64)
    while True:
        c, a = s.accept()
        threading.Thread(target=conn, args=(name, c, a), daemon=True).start()
def udp(name, port):
    s = bound(socket.SOCK_DGRAM, port)
    while True:
        d, a = s.recvfrom(65535)
        s.sendto(f"{name} {peer(a)} {len(d)}\n".encode(), a)
def late(name, port):
    trigger = bound(socket.SOCK_DGRAM, port + 1)
    s = bound(socket.SOCK_DGRAM, port)
    while True:
        _, a = s.recvfrom(100)
        s.connect(a)
        s.send(b"first\n")
        _, ta = trigger.recvfrom(100)
        s.send(b"late\n")
        s.settimeout(3)
        try:
            s.recv(100)
            verdict = b"answered"
        except ConnectionRefusedError:
            verdict = b"refused"
        except socket.timeout:
            verdict = b"silence"
        s.close()
        s = bound(socket.SOCK_DGRAM, port)  # before the verdict: the next round may follow
        trigger.sendto(verdict, ta)
for spec in sys.argv[1:]:
    kind, name, port = spec.split(":")
    threading.Thread(target={"tcp": tcp, "udp": udp, "late": late}[kind], args=(name, int(port)),
                     daemon=True).start()
threading.Event().wait()
)";

net::SocketAddress Addr(const std::string& s) { return *net::SocketAddress::Parse(s); }

// The pod's backends and the frontends the tests use.
const net::SocketAddress kPodA4 = Addr("10.89.2.1:8080"), kPodB4 = Addr("10.89.2.1:8081");
const net::SocketAddress kPodA6 = Addr("[fd00:89:2::1]:8080");
const net::SocketAddress kDnsA4 = Addr("10.89.2.1:5353"), kDnsA6 = Addr("[fd00:89:2::1]:5353");
const net::SocketAddress kExt4 = Addr("10.89.9.9:80"), kExt6 = Addr("[fd00:89:9::9]:80");
const net::SocketAddress kNodePort4 = Addr("10.89.1.2:30080");
const net::SocketAddress kNodePort6 = Addr("[fd00:89:1::2]:30080");
const net::SocketAddress kExtDns4 = Addr("10.89.9.9:53"), kExtDns6 = Addr("[fd00:89:9::9]:53");

socklb::Service Svc(std::vector<net::SocketAddress> fronts, std::vector<net::SocketAddress> bes,
                    bool udp = false) {
  socklb::Service s;
  for (const auto& f : fronts) {
    s.frontends.push_back({f, udp});
  }
  s.backends = std::move(bes);
  return s;
}

class ExtNatKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root";
    }
    auto ns = testutil::NetNs::Create();
    ASSERT_TRUE(ns.ok()) << ns.status();
    netns_ = std::move(*ns);
    for (const char* key : {"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"}) {
      ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
    }
    auto client = testutil::PeerHost::Create("nc", {"10.89.1.2/24", "fd00:89:1::2/64"},
                                             {"10.89.1.1/24", "fd00:89:1::1/64"},
                                             {"10.89.1.2", "fd00:89:1::2"});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    auto pod = testutil::PeerHost::Create("np", {"10.89.2.2/24", "fd00:89:2::2/64"},
                                          {"10.89.2.1/24", "fd00:89:2::1/64"},
                                          {"10.89.2.2", "fd00:89:2::2"});
    ASSERT_TRUE(pod.ok()) << pod.status();
    pod_ = std::move(*pod);
    for (const char* a : {"10.89.9.9/32", "fd00:89:9::9/128"}) {
      ASSERT_EQ(testutil::RunCommand({"ip", "addr", "add", a, "dev", "nc0", "nodad"}), 0) << a;
    }
    client_ns_.Reset(open(("/run/netns/" + client_->name()).c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(client_ns_);
    backends_ = std::make_unique<testutil::Subprocess>(
        pod_->Exec({"python3", "-c", kBackends, "tcp:a:8080", "tcp:b:8081", "udp:a:5353",
                    "udp:b:5354", "late:l:5355"}));
    ASSERT_TRUE(testutil::WaitFor(
        [&] {
          return Name(AskOnce(kPodA4, /*from_client=*/false)) == "a" &&
                 Name(AskOnce(kPodB4, false)) == "b" && Name(AskOnce(kPodA6, false)) == "a";
        },
        absl::Seconds(10)))
        << backends_->Output();
    auto fs = testutil::TestBpfFs::Create();
    ASSERT_TRUE(fs.ok()) << fs.status();
    bpffs_ = std::move(*fs);
  }

  void TearDown() override {
    Unload();
    if (bpffs_) {
      EXPECT_TRUE(NatObject::RemoveAll(bpffs_->path()).ok());
    }
    bpffs_.reset();
    backends_.reset();
    pod_.reset();
    client_.reset();
    netns_.reset();
  }

  // Loads the programs (pinned under the test bpffs), attaches them to nc0 and wraps the maps.
  void Load(LoadOptions options = {}) {
    options.bpf_root = bpffs_->path();
    auto nat = NatObject::Load(options);
    ASSERT_TRUE(nat.ok()) << nat.status();
    nat_ = std::move(*nat);
    ASSERT_TRUE(nat_->Attach("nc0").ok());
    ext_nat_bpf& s = nat_->skel();
    for (bpf_map* m : {s.maps.sluice_nat_svc, s.maps.sluice_nat_slot, s.maps.sluice_nat_member,
                       s.maps.sluice_nat_stats, s.maps.sluice_nat_range, s.maps.sluice_nat_ct,
                       s.maps.sluice_nat_drops, s.maps.sluice_nat_traffic, s.maps.sluice_nat_rmt,
                       s.maps.sluice_nat_snat}) {
      maps_.push_back(std::make_unique<fastpath::KernelBpfMap>(m));
    }
    services_ = std::make_unique<socklb::ServiceMaps>(
        socklb::ServiceMaps::Maps{*maps_[0], *maps_[1], *maps_[2], *maps_[3]});
  }
  void Unload() {
    services_.reset();
    maps_.clear();
    nat_.reset();
  }
  void Apply(std::vector<socklb::Change> changes) {
    std::vector<socklb::Gone> gone;
    ASSERT_TRUE(services_->Apply(changes, gone).ok());
  }
  // loadBalancerSourceRanges of `front`: sources in `ranges` ("10.89.1.0/24") only.
  void Guard(const net::SocketAddress& front, bool udp, const std::vector<std::string>& ranges) {
    fastpath::TypedMap<sluice_nat_range, uint8_t> trie(*maps_[4]);
    const sluice_lb_addr f = socklb::LbAddr(front);
    sluice_nat_range key{};
    std::memcpy(key.front.addr, f.addr, 16);
    key.front.port = f.port;
    key.front.proto = udp ? IPPROTO_UDP : IPPROTO_TCP;
    key.prefixlen = 160;
    for (const auto& [k, v] : trie.Entries()) {
      ASSERT_TRUE(trie.Delete(k).ok());
    }
    ASSERT_TRUE(trie.Update(key, 0).ok());
    for (const auto& r : ranges) {
      auto cidr = net::Cidr::Parse(r);
      ASSERT_TRUE(cidr.has_value()) << r;
      const sluice_lb_addr a = socklb::LbAddr(net::SocketAddress(cidr->base(), 0));
      std::memcpy(key.addr, a.addr, 16);
      key.prefixlen = 160 + cidr->prefix() + (cidr->base().is_v4() ? 96 : 0);
      ASSERT_TRUE(trie.Update(key, 1).ok());
    }
  }
  uint64_t Drops(sluice_nat_reason reason) const {
    std::vector<uint64_t> per_cpu(maps_[6]->value_size() / sizeof(uint64_t));
    const uint32_t key = reason;
    EXPECT_TRUE(maps_[6]->Lookup(&key, per_cpu.data()).ok());
    uint64_t sum = 0;
    for (uint64_t v : per_cpu) {
      sum += v;
    }
    return sum;
  }
  uint64_t TranslatedPackets() const {
    uint64_t sum = 0;
    (void)maps_[7]->ForEach([&](const void*, const void* value) {
      const auto* t = static_cast<const sluice_nat_traffic*>(value);
      for (size_t i = 0; i < maps_[7]->value_size() / sizeof(*t); ++i) {
        sum += t[i].packets;
      }
    });
    return sum;
  }
  // The pod's addresses are a remote backend's: SNATed to the node's on np0, where the programs
  // are then attached too (the replies come back there).
  void MakePodRemote() {
    ASSERT_TRUE(nat_->Attach("np0").ok());
    for (const char* ip : {"10.89.2.1", "fd00:89:2::1"}) {
      const sluice_lb_addr a = socklb::LbAddr(
          Addr(absl::StrCat(ip[0] == 'f' ? "[" : "", ip, ip[0] == 'f' ? "]" : "", ":0")));
      sluice_nat_host key{};
      std::memcpy(key.addr, a.addr, sizeof(key.addr));
      const uint8_t one = 1;
      ASSERT_TRUE(maps_[8]->Update(&key, &one, BPF_ANY).ok());
    }
    sluice_nat_ifaddr snat{};
    std::memcpy(snat.v4, socklb::LbAddr(Addr("10.89.2.2:0")).addr, 16);
    std::memcpy(snat.v6, socklb::LbAddr(Addr("[fd00:89:2::2]:0")).addr, 16);
    const uint32_t ifindex = if_nametoindex("np0");
    ASSERT_NE(ifindex, 0u);
    ASSERT_TRUE(maps_[9]->Update(&ifindex, &snat, BPF_ANY).ok());
  }
  // `ip route get` of `ip` in `host`'s namespace: the route, with its learned MTU if any.
  static std::string RouteGet(const testutil::PeerHost& host, const std::string& ip) {
    std::string out;
    testutil::RunCommand(host.Exec({"ip", "route", "get", ip}), &out);
    return out;
  }
  size_t Flows() const {
    return fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct>(*maps_[5]).Entries().size();
  }

  // Runs `f` with the thread in the client's namespace: sockets made there stay there.
  template <typename F>
  auto AtClient(F f) {
    SLUICE_CHECK(setns(client_ns_.get(), CLONE_NEWNET) == 0) << strerror(errno);
    auto result = f();
    SLUICE_CHECK(setns(netns_->fd(), CLONE_NEWNET) == 0) << strerror(errno);
    return result;
  }
  // A TCP listener at `at` in the pod's namespace, for a test that holds the backend's end.
  base::UniqueFd ListenInPod(const net::SocketAddress& at) {
    base::UniqueFd pod_ns(open(("/run/netns/" + pod_->name()).c_str(), O_RDONLY | O_CLOEXEC));
    SLUICE_CHECK(pod_ns && setns(pod_ns.get(), CLONE_NEWNET) == 0) << strerror(errno);
    base::UniqueFd listener = testutil::ListenTcp(at);
    SLUICE_CHECK(setns(netns_->fd(), CLONE_NEWNET) == 0) << strerror(errno);
    return listener;
  }
  // A TCP connection from the client (or the node) whose reads give up after 5 s.
  base::UniqueFd Connect(const net::SocketAddress& to, bool from_client = true,
                         int timeout_ms = 3000) {
    int err = 0;
    auto connect = [&] { return testutil::ConnectTcp(to, &err, timeout_ms); };
    base::UniqueFd fd = from_client ? AtClient(connect) : connect();
    const timeval tv{.tv_sec = 5, .tv_usec = 0};
    if (fd) {
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    return fd;
  }
  // Sends `payload` and a newline; the answer line, or "" when none came.
  static std::string Ask(int fd, const std::string& payload = "hi") {
    const std::string line = payload + "\n";
    if (send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
      return "";
    }
    std::string answer;
    char c;
    while (testutil::Recv(fd, &c, 1) == 1) {
      if (c == '\n') {
        return answer;
      }
      answer += c;
    }
    return "";
  }
  std::string AskOnce(const net::SocketAddress& to, bool from_client = true) {
    base::UniqueFd fd = Connect(to, from_client);
    return fd ? Ask(fd.get()) : "";
  }
  static std::string Name(const std::string& answer) {
    return std::string(answer.substr(0, answer.find(' ')));
  }
  // One datagram of `size` bytes from the client; the answer and where it came from.
  std::pair<std::string, std::optional<net::SocketAddress>> UdpAsk(const net::SocketAddress& to,
                                                                   size_t size = 1,
                                                                   int timeout_s = 2) {
    base::UniqueFd fd =
        AtClient([&] { return base::UniqueFd(socket(to.ip().family(), SOCK_DGRAM, 0)); });
    const timeval tv{.tv_sec = timeout_s, .tv_usec = 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_storage ss;
    const socklen_t len = to.ToSockaddr(&ss);
    const std::string payload(size, 'x');
    if (sendto(fd.get(), payload.data(), size, 0, reinterpret_cast<sockaddr*>(&ss), len) !=
        static_cast<ssize_t>(size)) {
      return {"", std::nullopt};
    }
    char buf[256];
    sockaddr_storage from;
    socklen_t from_len = sizeof(from);
    const ssize_t n =
        recvfrom(fd.get(), buf, sizeof(buf) - 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n <= 0) {
      return {"", std::nullopt};
    }
    std::string answer(buf, n);
    if (!answer.empty() && answer.back() == '\n') {
      answer.pop_back();
    }
    return {answer, net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), from_len)};
  }

  std::unique_ptr<testutil::NetNs> netns_;
  std::unique_ptr<testutil::PeerHost> client_;
  std::unique_ptr<testutil::PeerHost> pod_;
  base::UniqueFd client_ns_;
  std::unique_ptr<testutil::Subprocess> backends_;
  std::unique_ptr<testutil::TestBpfFs> bpffs_;
  std::unique_ptr<NatObject> nat_;
  std::vector<std::unique_ptr<fastpath::KernelBpfMap>> maps_;  // svc slot member stats range ct
                                                               // drops traffic rmt snat
  std::unique_ptr<socklb::ServiceMaps> services_;
};

// TCP and UDP, both families, to external IPs (extra node addresses) and NodePorts on the
// node's address: the pod sees the client's address, the client the frontend's. With strict
// reverse-path filtering, as many distributions set it.
TEST_F(ExtNatKernelTest, TranslatesBothWaysKeepingTheClientAddress) {
  for (const char* key : {"net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.nc0.rp_filter=1",
                          "net.ipv4.conf.np0.rp_filter=1"}) {
    ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
  }
  Load();
  Apply({{"web4", Svc({kExt4, kNodePort4}, {kPodA4})},
         {"web6", Svc({kExt6, kNodePort6}, {kPodA6})},
         {"dns4", Svc({kExtDns4}, {kDnsA4}, /*udp=*/true)},
         {"dns6", Svc({kExtDns6}, {kDnsA6}, true)}});
  EXPECT_EQ(AskOnce(kExt4), "a 10.89.1.1 3");
  EXPECT_EQ(AskOnce(kNodePort4), "a 10.89.1.1 3");
  EXPECT_EQ(AskOnce(kExt6), "a fd00:89:1::1 3");
  EXPECT_EQ(AskOnce(kNodePort6), "a fd00:89:1::1 3");
  for (const auto& [front, client] :
       {std::pair{kExtDns4, "10.89.1.1"}, std::pair{kExtDns6, "fd00:89:1::1"}}) {
    auto [answer, from] = UdpAsk(front);
    EXPECT_EQ(answer, absl::StrCat("a ", client, " 1")) << front.ToString();
    ASSERT_TRUE(from.has_value());
    EXPECT_EQ(*from, front) << "the reply's source";
  }
  auto counts = services_->Counters();
  EXPECT_EQ(counts["web4"].translated, 2u);
  EXPECT_EQ(counts["web6"].translated, 2u);
  EXPECT_EQ(counts["dns4"].translated, 1u);
  EXPECT_GT(TranslatedPackets(), 0u);
  EXPECT_EQ(Drops(SLUICE_NAT_MALFORMED), 0u);
}

// A frontend with no backends, and traffic to no frontend, reach the node's own sockets.
TEST_F(ExtNatKernelTest, PassesWhatIsNotAServedFrontend) {
  Load();
  Apply({{"web4", Svc({kExt4}, {})}});
  base::UniqueFd listener = testutil::ListenTcp(kExt4);
  ASSERT_TRUE(listener);
  base::UniqueFd conn = Connect(kExt4);
  EXPECT_TRUE(conn) << "the node's listener took it";
  EXPECT_EQ(Flows(), 0u);
}

// loadBalancerSourceRanges: a source in range is served; outside, its packets are dropped and
// counted.
TEST_F(ExtNatKernelTest, SourceRangesAdmitOrDrop) {
  Load();
  Apply({{"lb4", Svc({kExt4}, {kPodA4})}, {"lb6", Svc({kExt6}, {kPodA6})}});
  Guard(kExt4, false, {"10.89.0.0/16", "fd00:89:1::/64"});
  EXPECT_EQ(AskOnce(kExt4), "a 10.89.1.1 3");
  EXPECT_EQ(Drops(SLUICE_NAT_SOURCE_RANGE), 0u);
  Guard(kExt4, false, {"10.99.0.0/16"});
  EXPECT_FALSE(Connect(kExt4, true, 1000)) << "outside the ranges";
  EXPECT_GE(Drops(SLUICE_NAT_SOURCE_RANGE), 1u);
  EXPECT_GE(services_->Counters()["lb4"].refused, 1u);
  Guard(kExt6, false, {"fd00:99::/64"});
  EXPECT_FALSE(Connect(kExt6, true, 1000));
  Guard(kExt6, false, {"fd00:89:1::/64"});
  EXPECT_EQ(AskOnce(kExt6), "a fd00:89:1::1 3");
}

// ClientIP affinity keeps a client on one backend; without it round-robin uses both.
TEST_F(ExtNatKernelTest, AffinityKeepsTheClientOnOneBackend) {
  Load();
  Apply({{"rr", Svc({kExt4}, {kPodA4, kPodB4})}});
  std::set<std::string> seen;
  for (int i = 0; i < 4; ++i) {
    seen.insert(Name(AskOnce(kExt4)));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b"}));
  socklb::Service sticky = Svc({kExt4}, {kPodA4, kPodB4});
  sticky.affinity = absl::Seconds(60);
  Apply({{"rr", sticky}});
  seen.clear();
  for (int i = 0; i < 4; ++i) {
    seen.insert(Name(AskOnce(kExt4)));
  }
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_NE(*seen.begin(), "");
}

// A flow keeps its backend when the set is switched, and when the service goes; new flows
// follow the maps.
TEST_F(ExtNatKernelTest, FlowsKeepTheirBackendAcrossChanges) {
  Load();
  Apply({{"web", Svc({kExt4}, {kPodA4})}});
  base::UniqueFd conn = Connect(kExt4);
  ASSERT_TRUE(conn);
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3");
  Apply({{"web", Svc({kExt4}, {kPodB4})}});
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3") << "the open connection";
  EXPECT_EQ(AskOnce(kExt4), "b 10.89.1.1 3") << "a new one";
  Apply({{"web", std::nullopt}});
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3") << "after the service went";
}

// No room for a new flow: it is counted and passed to the stack, where a listener on the
// frontend address answers it; the existing flow goes on.
TEST_F(ExtNatKernelTest, FullConntrackPassesNewFlowsToTheStack) {
  Load({.max_flows = 2});  // one flow
  Apply({{"web", Svc({kExt4}, {kPodA4})}});
  base::UniqueFd first = Connect(kExt4);
  ASSERT_TRUE(first);
  EXPECT_EQ(Ask(first.get()), "a 10.89.1.1 3");
  base::UniqueFd listener = testutil::ListenTcp(kExt4);
  ASSERT_TRUE(listener);
  base::UniqueFd second = Connect(kExt4);
  ASSERT_TRUE(second) << "the node's listener completes the handshake";
  base::UniqueFd accepted(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(accepted);
  const timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(accepted.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  EXPECT_GE(Drops(SLUICE_NAT_CT_FULL), 1u);
  EXPECT_EQ(Ask(first.get()), "a 10.89.1.1 3");
  // Room again (the agent collected the first flow): the node's connection stays the node's,
  // only a SYN starts a flow.
  first.Reset();
  fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct> ct(*maps_[5]);
  for (const auto& [k, v] : ct.Entries()) {
    ASSERT_TRUE(ct.Delete(k).ok());
  }
  ASSERT_EQ(send(second.get(), "x\n", 2, MSG_NOSIGNAL), 2);
  char buf[2];
  EXPECT_EQ(testutil::Recv(accepted.get(), buf, 2), 2) << "reached the node's socket";
  ASSERT_EQ(send(accepted.get(), "node\n", 5, MSG_NOSIGNAL), 5);
  EXPECT_EQ(Ask(second.get(), "y"), "node");
  EXPECT_EQ(Flows(), 0u);
}

// A datagram larger than the MTU arrives in fragments: they are passed (counted once, by the
// first fragment) and reassembled for a listener on the node; small ones are translated.
TEST_F(ExtNatKernelTest, FragmentsArePassedToTheStack) {
  Load();
  Apply({{"dns4", Svc({kExtDns4}, {kDnsA4}, true)}, {"dns6", Svc({kExtDns6}, {kDnsA6}, true)}});
  uint64_t fragments = 0;
  for (const auto& front : {kExtDns4, kExtDns6}) {
    base::UniqueFd node(socket(front.ip().family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_storage ss;
    const socklen_t len = front.ToSockaddr(&ss);
    ASSERT_EQ(bind(node.get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << strerror(errno);
    std::thread reply([&] {
      char buf[4096];
      sockaddr_storage from;
      socklen_t from_len = sizeof(from);
      const timeval tv{.tv_sec = 5, .tv_usec = 0};
      setsockopt(node.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      const ssize_t n =
          recvfrom(node.get(), buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
      const std::string answer = absl::StrCat("node ", n);
      sendto(node.get(), answer.data(), answer.size(), 0, reinterpret_cast<sockaddr*>(&from),
             from_len);
    });
    EXPECT_EQ(UdpAsk(front, 3000).first, "node 3000") << front.ToString();
    reply.join();
    EXPECT_EQ(Drops(SLUICE_NAT_FRAGMENT), ++fragments);
    EXPECT_EQ(Name(UdpAsk(front).first), "a") << "small datagrams are translated";
  }
}

// A restarted agent: the first object goes (filters stay, maps pinned), the open connection
// keeps working; the next one reuses the pinned maps and replaces the filters in place. Then
// RemoveAll leaves no filter and no pin.
TEST_F(ExtNatKernelTest, RestartKeepsFlowsAndRemoveAllCleansUp) {
  Load();
  EXPECT_FALSE(nat_->adopted_maps());
  Apply({{"web", Svc({kExt4}, {kPodA4})}});
  base::UniqueFd conn = Connect(kExt4);
  ASSERT_TRUE(conn);
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3");
  Unload();
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3") << "no agent";
  Load();
  EXPECT_TRUE(nat_->adopted_maps());
  EXPECT_EQ(Flows(), 2u);
  EXPECT_EQ(Ask(conn.get()), "a 10.89.1.1 3") << "the next agent";
  EXPECT_EQ(Name(AskOnce(kExt4)), "a") << "a new connection, through the adopted service maps";
  EXPECT_EQ(nat_->Devices(), std::vector<std::string>{"nc0"});
  std::string filters;
  testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", "ingress"}, &filters);
  const size_t at = filters.find("handle 0x5c1e sluice_nat_in");
  EXPECT_NE(at, std::string::npos) << filters;
  EXPECT_EQ(filters.find("handle", at + 1), std::string::npos)
      << "replaced, not added: " << filters;
  Unload();
  ASSERT_TRUE(NatObject::RemoveAll(bpffs_->path()).ok());
  for (const char* dir : {"ingress", "egress"}) {
    testutil::RunCommand({"tc", "filter", "show", "dev", "nc0", dir}, &filters);
    EXPECT_EQ(filters.find("sluice_nat"), std::string::npos) << filters;
  }
  EXPECT_NE(access((bpffs_->path() + "/ext_nat").c_str(), F_OK), 0) << "pins removed";
}

// Path MTU discovery through the translation: the node's link to the pod has the smaller MTU,
// so the node answers the client's full-size segments with "fragmentation needed" / "packet
// too big" quoting (client, backend); rewritten to quote the frontend, the client's TCP lowers
// its MSS and the request arrives.
// The client's segments come as GSO skbs (veth TSO), which the FIB lookup lets through whatever
// their size: the program checks their segments, and the client's route cache shows that the
// error came and was matched to its socket.
TEST_F(ExtNatKernelTest, PathMtuDiscoveryWorksThroughTheTranslation) {
  ASSERT_EQ(testutil::RunCommand({"ip", "link", "set", "np0", "mtu", "1280"}), 0);
  Load();
  Apply({{"web4", Svc({kExt4}, {kPodA4})}, {"web6", Svc({kExt6}, {kPodA6})}});
  const std::string big(4096, 'x');
  for (const auto& [front, client] :
       {std::pair{kExt4, "10.89.1.1"}, std::pair{kExt6, "fd00:89:1::1"}}) {
    base::UniqueFd conn = Connect(front);
    ASSERT_TRUE(conn);
    EXPECT_EQ(Ask(conn.get(), big), absl::StrCat("a ", client, " 4097")) << front.ToString();
    EXPECT_THAT(RouteGet(*client_, front.ip().ToString()), HasSubstr("mtu 1280"));
  }
}

// Path MTU discovery for an SNATed flow, which the program forwards itself (the stack would drop
// it as a martian): the link to the pod, on "another node", has the smaller MTU, so the program
// answers the client's full-size segments with "fragmentation needed" / "packet too big" from
// the frontend, quoting what the client sent; the client's route cache learns the MTU and a
// 4 MB upload arrives whole. Twice: the second time the node's client-facing device completes
// checksums in software (tx offload off), so the client's stack checks every checksum of the
// error, those completed from the CHECKSUM_PARTIAL skb it was made from included.
TEST_F(ExtNatKernelTest, PathMtuDiscoveryForSnatedFlowsIsAnsweredByTheProgram) {
  ASSERT_EQ(testutil::RunCommand({"ip", "link", "set", "np0", "mtu", "1280"}), 0);
  Load();
  MakePodRemote();
  Apply({{"web4", Svc({kExt4}, {kPodA4})}, {"web6", Svc({kExt6}, {kPodA6})}});
  const std::string big(4 << 20, 'x');
  for (const bool offload : {true, false}) {
    if (!offload) {
      ASSERT_EQ(testutil::RunCommand({"ethtool", "-K", "nc0", "tx", "off"}), 0);
      for (const char* family : {"-4", "-6"}) {
        ASSERT_EQ(testutil::RunCommand(client_->Exec({"ip", family, "route", "flush", "cache"})),
                  0);
      }
    }
    for (const auto& [front, node] :
         {std::pair{kExt4, "10.89.2.2"}, std::pair{kExt6, "fd00:89:2::2"}}) {
      const std::string where = absl::StrCat(front.ToString(), offload ? "" : " (tx offload off)");
      EXPECT_THAT(RouteGet(*client_, front.ip().ToString()), Not(HasSubstr("mtu"))) << where;
      base::UniqueFd conn = Connect(front);
      ASSERT_TRUE(conn);
      const timeval tv{.tv_sec = 10, .tv_usec = 0};
      setsockopt(conn.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      EXPECT_EQ(Ask(conn.get(), big), absl::StrCat("a ", node, " ", big.size() + 1)) << where;
      EXPECT_THAT(RouteGet(*client_, front.ip().ToString()), HasSubstr("mtu 1280")) << where;
    }
  }
  EXPECT_GT(Drops(SLUICE_NAT_MTU_ICMP), 0u);
  EXPECT_EQ(Drops(SLUICE_NAT_MTU), 0u);
}

// The other way: the node's client-facing device has the smaller MTU (its side only: the
// client's link, and so the MSS it announces, stays at 1500), so a remote pod's large answer,
// forwarded by the program, does not fit there: the pod gets the error from the node's SNAT
// address, quoting what it sent, learns the MTU, and the client gets all of the answer.
TEST_F(ExtNatKernelTest, PathMtuDiscoveryForSnatedRepliesReachesThePod) {
  ASSERT_EQ(testutil::RunCommand({"ip", "link", "set", "nc0", "mtu", "1280"}), 0);
  Load();
  MakePodRemote();
  const net::SocketAddress pod4 = Addr("10.89.2.1:8090"), pod6 = Addr("[fd00:89:2::1]:8090");
  Apply({{"web4", Svc({kExt4}, {pod4})}, {"web6", Svc({kExt6}, {pod6})}});
  const std::string big(1 << 20, 'y');
  for (const auto& [front, pod, node] :
       {std::tuple{kExt4, pod4, "10.89.2.2"}, std::tuple{kExt6, pod6, "fd00:89:2::2"}}) {
    base::UniqueFd listener = ListenInPod(pod);
    ASSERT_TRUE(listener);
    base::UniqueFd client = Connect(front);
    ASSERT_TRUE(client);
    base::UniqueFd server(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    ASSERT_TRUE(server);
    const timeval tv{.tv_sec = 10, .tv_usec = 0};
    setsockopt(server.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ssize_t sent = 0;
    std::thread writer([&] { sent = send(server.get(), big.data(), big.size(), MSG_NOSIGNAL); });
    size_t got = 0;
    char buf[65536];
    for (ssize_t n; got < big.size() && (n = testutil::Recv(client.get(), buf, sizeof(buf))) > 0;) {
      got += n;
    }
    writer.join();
    EXPECT_EQ(sent, static_cast<ssize_t>(big.size())) << front.ToString();
    EXPECT_EQ(got, big.size()) << front.ToString();
    EXPECT_THAT(RouteGet(*pod_, node), HasSubstr("mtu 1280")) << front.ToString();
  }
  EXPECT_GT(Drops(SLUICE_NAT_MTU_ICMP), 0u);
}

// IPv4 without DF over the MTU, SNATed: a router would fragment it; the program cannot (and the
// stack would drop it as a martian), so it is dropped unanswered and counted `mtu`.
TEST_F(ExtNatKernelTest, SnatedIpv4WithoutDfOverTheMtuIsDroppedUnanswered) {
  ASSERT_EQ(testutil::RunCommand({"ip", "link", "set", "np0", "mtu", "1280"}), 0);
  Load();
  MakePodRemote();
  Apply({{"dns4", Svc({kExtDns4}, {kDnsA4}, /*udp=*/true)}});
  base::UniqueFd fd = AtClient([] { return base::UniqueFd(socket(AF_INET, SOCK_DGRAM, 0)); });
  ASSERT_TRUE(fd);
  const int dont = IP_PMTUDISC_DONT;  // no DF
  ASSERT_EQ(setsockopt(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof(dont)), 0);
  const timeval tv{.tv_sec = 5, .tv_usec = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_storage ss;
  const socklen_t len = kExtDns4.ToSockaddr(&ss);
  ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  // A small datagram first: the flow's first packet over the MTU would go to the proxy instead.
  char answer[64];
  ASSERT_EQ(send(fd.get(), "q", 1, 0), 1);
  const ssize_t n = recv(fd.get(), answer, sizeof(answer), 0);
  EXPECT_EQ(std::string(answer, std::max<ssize_t>(n, 0)), "a 10.89.2.2 1\n");
  const std::string big(1400, 'x');
  ASSERT_EQ(send(fd.get(), big.data(), big.size(), 0), static_cast<ssize_t>(big.size()));
  EXPECT_TRUE(testutil::WaitFor([&] { return Drops(SLUICE_NAT_MTU) > 0; }, absl::Seconds(10)));
  EXPECT_EQ(Drops(SLUICE_NAT_MTU_ICMP), 0u);
  EXPECT_THAT(RouteGet(*client_, "10.89.9.9"), Not(HasSubstr("mtu")));
}

// An ICMP error from the client's side about a reply it got from the frontend (its socket is
// gone: port unreachable) reaches the backend that sent the reply, quoting what it sent.
TEST_F(ExtNatKernelTest, IcmpErrorsFromTheClientReachTheBackend) {
  Load();
  const net::SocketAddress front4 = Addr("10.89.9.9:54"), front6 = Addr("[fd00:89:9::9]:54");
  Apply({{"late4", Svc({front4}, {Addr("10.89.2.1:5355")}, true)},
         {"late6", Svc({front6}, {Addr("[fd00:89:2::1]:5355")}, true)}});
  for (const auto& [front, trigger] : {std::pair{front4, Addr("10.89.2.1:5356")},
                                       std::pair{front6, Addr("[fd00:89:2::1]:5356")}}) {
    EXPECT_EQ(UdpAsk(front).first, "first") << front.ToString();  // then the socket closes
    EXPECT_EQ(UdpAsk(trigger, 1, 10).first, "refused") << front.ToString();
  }
}

// A flow idle past its age is gone: the client's next datagram from the same port is a new flow
// and follows the service's current backends.
TEST_F(ExtNatKernelTest, IdleFlowsAgeOut) {
  Load({.udp = absl::Milliseconds(300)});
  Apply({{"dns", Svc({kExtDns4}, {kDnsA4}, true)}});
  base::UniqueFd fd = AtClient([] { return base::UniqueFd(socket(AF_INET, SOCK_DGRAM, 0)); });
  const timeval tv{.tv_sec = 2, .tv_usec = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_storage ss;
  const socklen_t len = kExtDns4.ToSockaddr(&ss);
  ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
  auto ask = [&] {
    char buf[128];
    const ssize_t n = send(fd.get(), "q", 1, 0) == 1 ? recv(fd.get(), buf, sizeof(buf), 0) : -1;
    return n > 0 ? Name(std::string(buf, n)) : "";
  };
  EXPECT_EQ(ask(), "a");
  Apply({{"dns", Svc({kExtDns4}, {Addr("10.89.2.1:5354")}, true)}});
  // Idle (no datagram meanwhile) until both entries are older than the age, by the programs'
  // clock (bpf_ktime_get_ns: CLOCK_MONOTONIC).
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        const uint64_t now = ts.tv_sec * 1000000000ULL + ts.tv_nsec;
        auto entries = fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct>(*maps_[5]).Entries();
        return !entries.empty() && std::all_of(entries.begin(), entries.end(), [&](auto& e) {
          return now - e.second.last_ns > 300'000'000;
        });
      },
      absl::Seconds(10)));
  EXPECT_EQ(ask(), "b") << "the flow aged out: the next datagram took the new backend";
}

// A connection closed by FINs from both sides or by an RST ages out at the short closed age; a
// half-closed one (the client's FIN only) is kept: the backend may still send. The program marks
// the entries; the agent's collector, run with the same ages, removes what the rule says.
TEST_F(ExtNatKernelTest, ClosedConnectionsAgeOutHalfClosedOnesStay) {
  const LoadOptions options{.tcp_closed = absl::Milliseconds(300)};
  Load(options);
  const net::SocketAddress backend = Addr("10.89.2.1:8090");
  Apply({{"web", Svc({kExt4}, {backend})}});
  base::UniqueFd listener = ListenInPod(backend);
  ASSERT_TRUE(listener);
  // Both ends held by the test: it decides who closes.
  auto open_pair = [&] {
    base::UniqueFd client = Connect(kExt4);
    base::UniqueFd server(client ? accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC) : -1);
    return std::pair{std::move(client), std::move(server)};
  };
  auto [fins_c, fins_s] = open_pair();
  auto [rst_c, rst_s] = open_pair();
  auto [half_c, half_s] = open_pair();
  ASSERT_TRUE(fins_c && fins_s && rst_c && rst_s && half_c && half_s);
  ASSERT_EQ(Flows(), 6u);
  auto client_port = [](int fd) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    return net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&ss), len)->port();
  };
  // The flags of the forward entry of the client socket `fd`.
  fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct> ct(*maps_[5]);
  auto flags_of = [&](int fd) -> std::optional<uint32_t> {
    const uint16_t port = htons(client_port(fd));
    for (const auto& [k, v] : ct.Entries()) {
      if (!(v.flags & SLUICE_NAT_CT_REPLY) && k.sport == port) {
        return v.flags;
      }
    }
    return std::nullopt;
  };
  const uint16_t fins_port = client_port(fins_c.get()), half_port = client_port(half_c.get());
  ASSERT_EQ(shutdown(fins_c.get(), SHUT_WR), 0);
  ASSERT_EQ(shutdown(fins_s.get(), SHUT_WR), 0);
  const linger abort{.l_onoff = 1, .l_linger = 0};
  ASSERT_EQ(setsockopt(rst_c.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof(abort)), 0);
  const int rst_fd = rst_c.get();
  ASSERT_EQ(shutdown(half_c.get(), SHUT_WR), 0);
  constexpr uint32_t kBoth = SLUICE_NAT_CT_FIN_FWD | SLUICE_NAT_CT_FIN_REPLY;
  const int fins_fd = fins_c.get(), half_fd = half_c.get();  // clang 14: no binding captures
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto f = flags_of(fins_fd);
        auto h = flags_of(half_fd);
        return f && (*f & kBoth) == kBoth && h && (*h & kBoth) == SLUICE_NAT_CT_FIN_FWD;
      },
      absl::Seconds(10)));
  const std::optional<uint32_t> rst_port_flags = flags_of(rst_fd);
  ASSERT_TRUE(rst_port_flags);
  const uint16_t rst_port = htons(client_port(rst_fd));
  rst_c.Reset();  // the RST
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        for (const auto& [k, v] : ct.Entries()) {
          if (k.sport == rst_port && (v.flags & SLUICE_NAT_CT_RST)) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(10)));
  // Once every entry is idle past the closed age by the programs' clock (CLOCK_MONOTONIC).
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return absl::Seconds(ts.tv_sec) + absl::Nanoseconds(ts.tv_nsec);
  };
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        const absl::Duration t = now();
        auto entries = ct.Entries();
        return std::all_of(entries.begin(), entries.end(), [&](auto& e) {
          return t - absl::Nanoseconds(static_cast<int64_t>(e.second.last_ns)) > options.tcp_closed;
        });
      },
      absl::Seconds(10)));
  FlowTable table(*maps_[5], {.tcp_established = options.tcp_established,
                              .tcp_close_wait = options.tcp_close_wait,
                              .tcp_closed = options.tcp_closed,
                              .udp = options.udp});
  auto left = table.Collect(now());
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 2u);
  std::set<uint16_t> ports;
  for (const auto& [k, v] : ct.Entries()) {
    ports.insert(ntohs(v.flags & SLUICE_NAT_CT_REPLY ? k.dport : k.sport));
  }
  EXPECT_EQ(ports, std::set<uint16_t>{half_port}) << "fins " << fins_port;
  // The half-closed connection still carries the backend's data.
  ASSERT_EQ(send(half_s.get(), "late\n", 5, MSG_NOSIGNAL), 5);
  char buf[5];
  EXPECT_EQ(testutil::Recv(half_c.get(), buf, 5), 5);
}

// A client that reached a backend through a frontend and closed, then connects to that backend
// directly from the same port: the direct connection's replies must not be rewritten to come
// from the frontend by the closed flow's reply entry (its SYN releases the tuple).
TEST_F(ExtNatKernelTest, ADirectConnectionTakesOverAClosedFlowsTuple) {
  Load();
  const net::SocketAddress backend = Addr("10.89.2.1:8090");
  Apply({{"web", Svc({kExt4}, {backend})}});
  base::UniqueFd listener = ListenInPod(backend);
  ASSERT_TRUE(listener);
  constexpr uint16_t kPort = 40123;
  // A client socket bound to kPort, connected to `to`; the server's end, which sends `hello`.
  auto open_from_port = [&](const net::SocketAddress& to, const char* hello) {
    base::UniqueFd c = AtClient([&] {
      base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int one = 1;
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      const timeval tv{.tv_sec = 3, .tv_usec = 0};
      setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      sockaddr_in local{.sin_family = AF_INET, .sin_port = htons(kPort)};
      sockaddr_storage dst;
      const socklen_t dst_len = to.ToSockaddr(&dst);
      if (bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
          connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), dst_len) != 0) {
        fd.Reset();
      }
      return fd;
    });
    base::UniqueFd server(c ? accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC) : -1);
    if (server) {
      EXPECT_EQ(send(server.get(), hello, strlen(hello), MSG_NOSIGNAL),
                static_cast<ssize_t>(strlen(hello)));
    }
    return std::pair{std::move(c), std::move(server)};
  };
  auto read_line = [](int fd) {
    std::string line;
    char ch;
    while (testutil::Recv(fd, &ch, 1) == 1 && ch != '\n') {
      line += ch;
    }
    return line;
  };
  {
    auto [c, server] = open_from_port(kExt4, "nat\n");
    ASSERT_TRUE(c && server);
    EXPECT_EQ(read_line(c.get()), "nat");
    ASSERT_EQ(Flows(), 2u);
    const linger abort{.l_onoff = 1, .l_linger = 0};
    ASSERT_EQ(setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &abort, sizeof(abort)), 0);
  }  // the client's RST closes the flow; its entries stay for the closed age (10 s)
  fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct> ct(*maps_[5]);
  ASSERT_TRUE(testutil::WaitFor(
      [&] {
        auto entries = ct.Entries();
        return entries.size() == 2 && (entries.begin()->second.flags & SLUICE_NAT_CT_RST);
      },
      absl::Seconds(10)));
  auto [c, server] = open_from_port(backend, "direct\n");
  ASSERT_TRUE(c && server) << "the direct connection's handshake failed";
  EXPECT_EQ(read_line(c.get()), "direct");
  EXPECT_EQ(Flows(), 0u) << "the closed flow's entries were not released";
}

// A pinned map of another size (the flags changed between agents) is replaced; the others are
// reused.
TEST_F(ExtNatKernelTest, PinnedMapsOfAnotherSizeAreReplaced) {
  Load({.max_flows = 64});
  Apply({{"web", Svc({kExt4}, {kPodA4})}});
  Unload();
  Load({.max_flows = 128});
  EXPECT_TRUE(nat_->adopted_maps());
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(maps_[5]->fd(), &info, &len), 0);
  EXPECT_EQ(info.max_entries, 128u);
  EXPECT_EQ(AskOnce(kExt4), "a 10.89.1.1 3") << "the service maps were reused";
}

// The packets the stack forwards to the pod, by an nftables counter on the forward hook.
uint64_t ForwardedToPod() {
  std::string out;
  testutil::RunCommand({"nft", "list", "chain", "inet", "sluice_test", "forwarded"}, &out);
  const size_t at = out.find("packets ");
  return at == std::string::npos ? 0 : std::stoull(out.substr(at + 8));
}

// A translated request leaves by the FIB lookup and a redirect, not through the stack's
// forwarding (and netfilter); with fib_forward off, through the stack as before.
TEST_F(ExtNatKernelTest, TranslatedRequestsSkipTheStacksForwarding) {
  ASSERT_EQ(testutil::RunCommand({"nft",
                                  "add table inet sluice_test; add chain inet sluice_test "
                                  "forwarded { type filter hook forward priority 0; }; add rule "
                                  "inet sluice_test forwarded ip daddr 10.89.2.1 counter"}),
            0);
  for (bool fib : {true, false}) {
    SCOPED_TRACE(fib ? "fib_forward" : "to the stack");
    Load({.fib_forward = fib});
    Apply({{"web4", Svc({kExt4}, {kPodA4})}, {"dns4", Svc({kExtDns4}, {kDnsA4}, true)}});
    const uint64_t before = ForwardedToPod();
    EXPECT_EQ(AskOnce(kExt4), "a 10.89.1.1 3");
    EXPECT_EQ(UdpAsk(kExtDns4).first, "a 10.89.1.1 1");
    if (fib) {
      EXPECT_EQ(ForwardedToPod(), before);
    } else {
      EXPECT_GT(ForwardedToPod(), before);
    }
    Unload();
    ASSERT_TRUE(NatObject::RemoveAll(bpffs_->path()).ok());
  }
}

// ---- SNAT: the pod as a backend on another node (eTP Cluster) ----

// TCP and UDP, both families: the pod sees the node's address on np0, the client gets its
// answers from the frontend, both directions forwarded by the FIB (a node address as source
// would be a martian to the stack).
TEST_F(ExtNatKernelTest, RemoteBackendsSeeTheNodeAddressRepliesComeFromTheFrontend) {
  for (const char* key : {"net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.nc0.rp_filter=1",
                          "net.ipv4.conf.np0.rp_filter=1"}) {
    ASSERT_EQ(testutil::RunCommand({"sysctl", "-qw", key}), 0) << key;
  }
  Load();
  MakePodRemote();
  Apply({{"web4", Svc({kExt4, kNodePort4}, {kPodA4})},
         {"web6", Svc({kExt6}, {kPodA6})},
         {"dns4", Svc({kExtDns4}, {kDnsA4}, /*udp=*/true)},
         {"dns6", Svc({kExtDns6}, {kDnsA6}, true)}});
  EXPECT_EQ(AskOnce(kExt4), "a 10.89.2.2 3");
  EXPECT_EQ(AskOnce(kNodePort4), "a 10.89.2.2 3");
  EXPECT_EQ(AskOnce(kExt6), "a fd00:89:2::2 3");
  for (const auto& [front, node] :
       {std::pair{kExtDns4, "10.89.2.2"}, std::pair{kExtDns6, "fd00:89:2::2"}}) {
    auto [answer, from] = UdpAsk(front);
    EXPECT_EQ(answer, absl::StrCat("a ", node, " 1")) << front.ToString();
    ASSERT_TRUE(from.has_value());
    EXPECT_EQ(*from, front) << "the reply's source";
  }
  // Each flow: a forward entry and a reply entry keyed (backend, node address, SNAT port).
  size_t replies = 0;
  for (const auto& [k, v] :
       fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct>(*maps_[5]).Entries()) {
    EXPECT_NE(v.flags & SLUICE_NAT_CT_SNAT, 0u);
    if ((v.flags & SLUICE_NAT_CT_REPLY) != 0) {
      ++replies;
      EXPECT_GE(ntohs(k.dport), kSnatPortMin);
      EXPECT_LE(ntohs(k.dport), kSnatPortMax);
    }
  }
  EXPECT_EQ(replies, 5u);
  EXPECT_EQ(Drops(SLUICE_NAT_NO_ROUTE), 0u);
  EXPECT_EQ(Drops(SLUICE_NAT_SNAT_PORTS), 0u);
}

// Many connections at once through one frontend to one backend: each has its own SNAT port.
TEST_F(ExtNatKernelTest, ConcurrentFlowsGetDistinctSnatPorts) {
  Load();
  MakePodRemote();
  Apply({{"web4", Svc({kExt4}, {kPodA4})}});
  std::vector<base::UniqueFd> conns;
  for (int i = 0; i < 32; ++i) {
    conns.push_back(Connect(kExt4));
    ASSERT_TRUE(conns.back());
    EXPECT_EQ(Ask(conns.back().get()), "a 10.89.2.2 3");
  }
  std::set<uint16_t> ports;
  for (const auto& [k, v] :
       fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct>(*maps_[5]).Entries()) {
    if ((v.flags & SLUICE_NAT_CT_REPLY) == 0) {
      ports.insert(ntohs(v.nat.port));
    }
  }
  EXPECT_EQ(ports.size(), 32u);
  for (auto& c : conns) {
    EXPECT_EQ(Ask(c.get(), "again"), "a 10.89.2.2 6") << "still on its flow";
  }
}

// ICMP errors about SNATed flows, both ways: the client's port unreachable about a reply
// reaches the backend quoting the SNAT address it sent to; the backend's port unreachable
// reaches the client quoting what the client sent (its connected socket is refused).
TEST_F(ExtNatKernelTest, IcmpErrorsOfSnatedFlowsAreTranslated) {
  Load();
  MakePodRemote();
  const net::SocketAddress front4 = Addr("10.89.9.9:54"), front6 = Addr("[fd00:89:9::9]:54");
  const net::SocketAddress closed4 = Addr("10.89.9.9:55"), closed6 = Addr("[fd00:89:9::9]:55");
  Apply({{"late4", Svc({front4}, {Addr("10.89.2.1:5355")}, true)},
         {"late6", Svc({front6}, {Addr("[fd00:89:2::1]:5355")}, true)},
         {"closed4", Svc({closed4}, {Addr("10.89.2.1:5999")}, true)},
         {"closed6", Svc({closed6}, {Addr("[fd00:89:2::1]:5999")}, true)}});
  for (const auto& [front, trigger] : {std::pair{front4, Addr("10.89.2.1:5356")},
                                       std::pair{front6, Addr("[fd00:89:2::1]:5356")}}) {
    EXPECT_EQ(UdpAsk(front).first, "first") << front.ToString();  // then the socket closes
    EXPECT_EQ(UdpAsk(trigger, 1, 10).first, "refused") << front.ToString();
  }
  for (const net::SocketAddress& closed : {closed4, closed6}) {
    base::UniqueFd fd = AtClient(
        [&] { return base::UniqueFd(socket(closed.ip().family(), SOCK_DGRAM | SOCK_CLOEXEC, 0)); });
    const timeval tv{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_storage ss;
    const socklen_t len = closed.ToSockaddr(&ss);
    ASSERT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0);
    ASSERT_EQ(send(fd.get(), "x", 1, 0), 1);
    char buf[8];
    EXPECT_EQ(recv(fd.get(), buf, sizeof(buf), 0), -1);
    EXPECT_EQ(errno, ECONNREFUSED) << closed.ToString() << ": " << strerror(errno);
  }
}

// ---- BPF_PROG_TEST_RUN: the port allocation, packet by packet ----

constexpr int kTcActOk = 0, kTcActRedirect = 7;

uint32_t Sum16(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  }
  return sum;
}
uint16_t Fold16(uint32_t sum) {
  while (sum >> 16 != 0) {
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return static_cast<uint16_t>(sum);
}

// An IPv4 TCP segment (Ethernet, 20-byte IP and TCP headers) with right checksums.
std::vector<uint8_t> Segment(const net::SocketAddress& from, const net::SocketAddress& to,
                             uint8_t flags) {
  std::vector<uint8_t> pkt(ETH_HLEN + 40);
  pkt[12] = 0x08;
  uint8_t* ip = &pkt[ETH_HLEN];
  ip[0] = 0x45;
  ip[3] = 40;
  ip[8] = 64;
  ip[9] = IPPROTO_TCP;
  std::memcpy(ip + 12, from.ip().bytes(), 4);
  std::memcpy(ip + 16, to.ip().bytes(), 4);
  const uint16_t ip_csum = ~Fold16(Sum16(ip, 20));
  ip[10] = ip_csum >> 8;
  ip[11] = ip_csum & 0xff;
  uint8_t* tcp = ip + 20;
  tcp[0] = from.port() >> 8;
  tcp[1] = from.port() & 0xff;
  tcp[2] = to.port() >> 8;
  tcp[3] = to.port() & 0xff;
  tcp[12] = 5 << 4;
  tcp[13] = flags;
  tcp[14] = 0xff;
  const uint16_t csum = ~Fold16(Sum16(tcp, 20, Sum16(ip + 12, 8) + IPPROTO_TCP + 20));
  tcp[16] = csum >> 8;
  tcp[17] = csum & 0xff;
  return pkt;
}

struct Ran {
  int verdict;
  std::string from, to;  // addresses and ports as the packet left
  bool checksums_ok;
};

Ran TestRun(int prog, const std::vector<uint8_t>& in, const char* device) {
  std::vector<uint8_t> out(in.size() + 64);
  __sk_buff ctx{};
  ctx.ifindex = if_nametoindex(device);
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = in.data(), .data_out = out.data(),
              .data_size_in = static_cast<uint32_t>(in.size()),
              .data_size_out = static_cast<uint32_t>(out.size()), .ctx_in = &ctx,
              .ctx_size_in = sizeof(ctx), .repeat = 1);
  if (bpf_prog_test_run_opts(prog, &opts) != 0) {
    return {-1, "", "", false};
  }
  const uint8_t* ip = &out[ETH_HLEN];
  auto at = [&](const uint8_t* a, const uint8_t* port) {
    return net::SocketAddress(*net::IpAddress::FromBytes(AF_INET, a, 4),
                              static_cast<uint16_t>(port[0] << 8 | port[1]))
        .ToString();
  };
  const bool ok = Fold16(Sum16(ip, 20)) == 0xffff &&
                  Fold16(Sum16(ip + 20, 20, Sum16(ip + 12, 8) + IPPROTO_TCP + 20)) == 0xffff;
  return {static_cast<int>(opts.retval), at(ip + 12, ip + 20), at(ip + 16, ip + 22), ok};
}

// Two SNAT ports: two flows take one each, a third finds none and is passed to the stack
// (counted); a reply to each port goes back to its own client.
TEST_F(ExtNatKernelTest, SnatPortsAreReservedAndExhaustionIsCounted) {
  Load({.tcp_established = absl::Seconds(5), .snat_port_min = 40000, .snat_port_max = 40001});
  MakePodRemote();
  Apply({{"web4", Svc({kExt4}, {kPodA4})}});
  const int in = bpf_program__fd(nat_->skel().progs.sluice_nat_in);
  std::map<std::string, std::string> client_of;  // SNAT source -> client
  for (const char* client : {"10.89.1.1:50001", "10.89.1.1:50002"}) {
    Ran r = TestRun(in, Segment(Addr(client), kExt4, 0x02), "nc0");
    EXPECT_EQ(r.verdict, kTcActRedirect) << client;
    EXPECT_EQ(r.to, kPodA4.ToString());
    EXPECT_TRUE(r.checksums_ok);
    EXPECT_TRUE(r.from == "10.89.2.2:40000" || r.from == "10.89.2.2:40001") << r.from;
    client_of[r.from] = client;
  }
  ASSERT_EQ(client_of.size(), 2u) << "distinct ports";
  // Retransmitted SYN: the same flow, the same port.
  Ran again = TestRun(in, Segment(Addr("10.89.1.1:50001"), kExt4, 0x02), "nc0");
  EXPECT_EQ(client_of[again.from], "10.89.1.1:50001");
  Ran third = TestRun(in, Segment(Addr("10.89.1.1:50003"), kExt4, 0x02), "nc0");
  EXPECT_EQ(third.verdict, kTcActOk);
  EXPECT_EQ(third.to, kExt4.ToString()) << "untranslated, to the proxy";
  EXPECT_EQ(Drops(SLUICE_NAT_SNAT_PORTS), 1u);
  for (const auto& [snat, client] : client_of) {
    Ran r = TestRun(in, Segment(kPodA4, Addr(snat), 0x12), "np0");
    EXPECT_EQ(r.verdict, kTcActRedirect) << snat;
    EXPECT_EQ(r.from, kExt4.ToString());
    EXPECT_EQ(r.to, client);
    EXPECT_TRUE(r.checksums_ok);
  }
  // A port whose flow is dead (idle past its age) is taken over by the next flow.
  fastpath::TypedMap<sluice_nat_tuple, sluice_nat_ct> ct(*maps_[5]);
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  for (auto [k, v] : ct.Entries()) {
    v.last_ns = static_cast<uint64_t>(mono.tv_sec - 60) * 1000000000ULL;  // bpf_ktime_get_ns
    ASSERT_TRUE(ct.Update(k, v).ok());
  }
  Ran fourth = TestRun(in, Segment(Addr("10.89.1.1:50004"), kExt4, 0x02), "nc0");
  EXPECT_EQ(fourth.verdict, kTcActRedirect);
  EXPECT_EQ(Drops(SLUICE_NAT_SNAT_PORTS), 1u);
  ASSERT_TRUE(client_of.contains(fourth.from));
  Ran reply = TestRun(in, Segment(kPodA4, Addr(fourth.from), 0x12), "np0");
  EXPECT_EQ(reply.to, "10.89.1.1:50004") << "the port is the new flow's";
  EXPECT_EQ(Flows(), 4u) << "the dead flow's forward entry went with its port";
}

// No route to the backend, or no SNAT address on the device the FIB picks: a new flow is
// left to the stack (the proxy), counted.
TEST_F(ExtNatKernelTest, NoSnatAddressLeavesNewFlowsToTheStack) {
  Load();
  MakePodRemote();
  const uint32_t np0 = if_nametoindex("np0");
  ASSERT_TRUE(maps_[9]->Delete(&np0).ok());
  Apply({{"web4", Svc({kExt4}, {kPodA4})}});
  const int in = bpf_program__fd(nat_->skel().progs.sluice_nat_in);
  Ran r = TestRun(in, Segment(Addr("10.89.1.1:50001"), kExt4, 0x02), "nc0");
  EXPECT_EQ(r.verdict, kTcActOk);
  EXPECT_EQ(r.to, kExt4.ToString());
  EXPECT_EQ(Drops(SLUICE_NAT_NO_ROUTE), 1u);
  EXPECT_EQ(Flows(), 0u);
}

}  // namespace
}  // namespace sluice::extnat
