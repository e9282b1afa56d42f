// SPDX-License-Identifier: Apache-2.0
// ExtNat on the real kernel: its startup self-test passes here (CI's kernel has tc BPF) and can
// run again at once, and fails, naming what, where the programs do not translate; and its
// programming works over the kernel's maps (the LPM trie walked and swept by an agent that adopted
// it, conntrack entries aged). What the programs do with the entries: ext_nat_kernel_test.
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/unique_fd.h"
#include <bpf/bpf.h>

#include "agent/dataplane/extnat/ext_nat.h"
#include "tests/testutil/cgroup.h"
#include "tests/testutil/netns.h"

namespace sluice::extnat {
namespace {

TEST(ExtNatSelfTest, PassesTwice) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root";
  }
  for (int run = 0; run < 2; ++run) {
    const absl::Status st = SelfTest();
    ASSERT_TRUE(st.ok()) << st;
  }
}

// The packet checks fail where the programs do not translate: here no frontend is programmed,
// then one backend is another than the checks expect.
TEST(ExtNatSelfTest, FailsNamingWhatWasNotTranslated) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root";
  }
  LoadOptions options;
  options.max_frontends = options.max_slots = options.max_affinity = options.max_flows = 16;
  auto nat = ExtNat::Create(options);
  ASSERT_TRUE(nat.ok()) << nat.status();
  absl::Status st = SelfTestPackets(*(*nat)->object());
  EXPECT_TRUE(absl::IsInternal(st)) << st;
  EXPECT_THAT(std::string(st.message()),
              ::testing::HasSubstr("TCP IPv4: the client's SYN to 192.0.2.2:80 at ingress: left "
                                   "as 192.0.2.1:40000 -> 192.0.2.2:80, not 192.0.2.1:40000 -> "
                                   "192.0.2.3:8080"));
  std::map<std::string, Service> services = SelfTestServices();
  ASSERT_TRUE((*nat)->ApplyAll(services).ok());
  ASSERT_TRUE(SelfTestPackets(*(*nat)->object()).ok());
  services.at("self-test/UDP IPv6").backends = {*net::SocketAddress::Parse("[2001:db8::4]:5353")};
  ASSERT_TRUE((*nat)->ApplyAll(services).ok());
  st = SelfTestPackets(*(*nat)->object());
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("UDP IPv6: the client's datagram"))
      << st;
}

net::SocketAddress Addr(const char* s) { return *net::SocketAddress::Parse(s); }

Service Guarded(const char* lb_ip, const char* range) {
  Service s;
  s.frontends = {{Addr(lb_ip), false}};
  s.backends = {Addr("10.0.0.1:8080")};
  s.source_ranges[Addr(lb_ip).ip()] = {*net::Cidr::Parse(range)};
  return s;
}

// Our map `name` pinned somewhere under `root`, as bpftool would open it.
base::UniqueFd Pinned(const std::string& root, const std::string& name) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.path().filename() == name) {
      return base::UniqueFd(bpf_obj_get(e.path().c_str()));
    }
  }
  return base::UniqueFd();
}

size_t Count(int fd, size_t key_size) {
  std::vector<char> key(key_size), next(key_size);
  size_t n = 0;
  for (bool first = true; bpf_map_get_next_key(fd, first ? nullptr : key.data(), next.data()) == 0;
       first = false) {
    ++n;
    key.swap(next);
  }
  return n;
}

absl::Duration Monotonic() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::DurationFromTimespec(ts);
}

// A UDP flow's two entries, last seen at `last`.
void AddFlow(int ct, uint16_t client_port, absl::Duration last) {
  const sluice_lb_addr client =
      socklb::LbAddr(net::SocketAddress(Addr("198.51.100.7:0").ip(), client_port));
  const sluice_lb_addr front = socklb::LbAddr(Addr("203.0.113.10:53"));
  const sluice_lb_addr backend = socklb::LbAddr(Addr("10.0.0.1:53"));
  sluice_nat_tuple forward{}, reply{};
  std::memcpy(forward.saddr, client.addr, 16);
  std::memcpy(forward.daddr, front.addr, 16);
  forward.sport = client.port;
  forward.dport = front.port;
  forward.proto = reply.proto = IPPROTO_UDP;
  std::memcpy(reply.saddr, backend.addr, 16);
  std::memcpy(reply.daddr, client.addr, 16);
  reply.sport = backend.port;
  reply.dport = client.port;
  const uint64_t ns = static_cast<uint64_t>(absl::ToInt64Nanoseconds(last));
  const sluice_nat_ct f{.to = backend, .id = 1, .flags = 0, .last_ns = ns};
  const sluice_nat_ct r{.to = front, .id = 1, .flags = SLUICE_NAT_CT_REPLY, .last_ns = ns};
  ASSERT_EQ(bpf_map_update_elem(ct, &forward, &f, BPF_NOEXIST), 0);
  ASSERT_EQ(bpf_map_update_elem(ct, &reply, &r, BPF_NOEXIST), 0);
}

TEST(ExtNatKernelMaps, AnAdoptingAgentSweepsRangesAndAgesFlows) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root";
  }
  auto fs = testutil::TestBpfFs::Create();
  ASSERT_TRUE(fs.ok()) << fs.status();
  LoadOptions options;
  options.bpf_root = (*fs)->path();
  options.max_frontends = options.max_slots = options.max_affinity = 64;
  options.max_flows = 64;
  options.udp = absl::Seconds(30);
  {
    auto earlier = ExtNat::Create(options);
    ASSERT_TRUE(earlier.ok()) << earlier.status();
    ASSERT_TRUE((*earlier)
                    ->Apply({{"web", Guarded("203.0.113.10:80", "198.51.100.0/24")},
                             {"gone", Guarded("203.0.113.11:80", "198.51.101.0/24")}})
                    .ok());
  }
  base::UniqueFd ranges = Pinned(options.bpf_root, "sluice_nat_range");
  base::UniqueFd ct = Pinned(options.bpf_root, "sluice_nat_ct");
  ASSERT_TRUE(ranges && ct);
  EXPECT_EQ(Count(ranges.get(), sizeof(sluice_nat_range)), 4u);

  auto nat = ExtNat::Create(options);
  ASSERT_TRUE(nat.ok()) << nat.status();
  EXPECT_TRUE((*nat)->adopted());
  ASSERT_TRUE((*nat)->ApplyAll({{"web", Guarded("203.0.113.10:80", "198.51.100.0/24")}}).ok());
  EXPECT_EQ(Count(ranges.get(), sizeof(sluice_nat_range)), 2u);  // "gone"'s swept
  EXPECT_EQ((*nat)->Frontends().size(), 1u);

  const absl::Duration now = Monotonic();
  AddFlow(ct.get(), 40000, now - absl::Minutes(5));
  AddFlow(ct.get(), 40001, now);
  auto left = (*nat)->CollectFlows(now + absl::Seconds(1));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 2u);
  EXPECT_EQ(Count(ct.get(), sizeof(sluice_nat_tuple)), 2u);
  EXPECT_EQ((*nat)->flows(), 2u);
}

}  // namespace
}  // namespace sluice::extnat
