// SPDX-License-Identifier: Apache-2.0
// SocketLb on the real kernel, below the agent: the programs attach to a test cgroup this
// process is moved into (never the machine's root), in a private network namespace, pinned to
// a private bpffs. Without CAP_BPF/CAP_NET_ADMIN or cgroup v2 they skip.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include <bpf/bpf.h>

#include "agent/net/socket.h"
#include "agent/socklb/probe.h"
#include "agent/socklb/socket_lb.h"
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
  absl::StatusOr<std::unique_ptr<SocketLb>> Create(bool pin, uint32_t max_frontends = 262144) {
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

// A translated socket's reverse entry (for getpeername/recvmsg) goes when the socket closes:
// the LRU map holds live sockets only, so a long-lived one's entry is not evicted by churn.
TEST_F(SocketLbKernelTest, ReverseEntriesGoWithTheirSockets) {
  auto lb = Create(true);
  ASSERT_TRUE(lb.ok()) << lb.status();
  ASSERT_TRUE((*lb)->Apply({Svc(1)}).ok());
  base::UniqueFd rev(bpf_obj_get((bpffs_->path() + "/sluice_lb_rev").c_str()));
  ASSERT_TRUE(rev) << strerror(errno);
  auto entries = [&] {
    int n = 0;
    sluice_lb_rev key{}, next{};
    for (const void* prev = nullptr; bpf_map_get_next_key(rev.get(), prev, &next) == 0;
         prev = &key) {
      key = next;
      ++n;
    }
    return n;
  };
  int err = 0;
  auto held = testutil::ConnectTcp(Addr("127.255.0.1:80"), &err);
  ASSERT_TRUE(held) << strerror(err);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(Translated(1));
  }
  EXPECT_EQ(entries(), 1);  // the held socket's
  held.Reset();
  EXPECT_EQ(entries(), 0);
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

}  // namespace
}  // namespace sluice::socklb
