// SPDX-License-Identifier: Apache-2.0
// LinkWatcher against the real kernel, inside a network namespace of the test's own.
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

#include "agent/dataplane/vip/link_watcher.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"

namespace sluice::vip {
namespace {

void Shell(std::vector<std::string> argv) {
  std::string output;
  const std::string text = absl::StrJoin(argv, " ");
  ASSERT_EQ(testutil::RunCommand(std::move(argv), &output), 0) << text << ": " << output;
}

class LinkWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ns = testutil::NetNs::Create();
    if (!ns.ok()) {
      GTEST_SKIP() << "needs CAP_SYS_ADMIN for a network namespace: " << ns.status();
    }
    ns_ = std::move(*ns);
    auto loop = event::EventLoop::Create();
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    // veth pairs: this kernel may have no dummy links.
    Shell({"ip", "link", "add", "vips0", "type", "veth", "peer", "name", "vips1"});
    Shell({"ip", "link", "add", "ext0", "type", "veth", "peer", "name", "ext1"});
    auto watcher = LinkWatcher::Create(*loop_, "vips0", [this] { ++calls_; });
    ASSERT_TRUE(watcher.ok()) << watcher.status();
    watcher_ = std::move(*watcher);
  }
  void TearDown() override {
    watcher_.reset();
    loop_.reset();
    ns_.reset();  // the links go with the namespace
  }

  // Runs the loop until the watcher calls back (a deadline: the notification is already
  // queued when `ip` returns, so this normally takes one iteration).
  bool WaitForCall() {
    const int before = calls_;
    for (int i = 0; i < 100 && calls_ == before; ++i) {
      loop_->RunOnce(absl::Milliseconds(100));
    }
    return calls_ > before;
  }
  // Runs every callback already due without waiting: rtnetlink queues its notifications on
  // our socket before the request that caused them returns.
  void RunPending() {
    while (loop_->RunOnce(absl::ZeroDuration())) {
    }
  }

  std::unique_ptr<testutil::NetNs> ns_;
  std::unique_ptr<event::EventLoop> loop_;
  std::unique_ptr<LinkWatcher> watcher_;
  int calls_ = 0;
};

TEST_F(LinkWatcherTest, AnAddressOrLinkChangeCallsBack) {
  Shell({"ip", "addr", "add", "192.0.2.1/24", "dev", "ext0"});
  EXPECT_TRUE(WaitForCall());
  Shell({"ip", "-6", "addr", "add", "2001:db8::1/64", "dev", "ext0", "nodad"});
  EXPECT_TRUE(WaitForCall());
  Shell({"ip", "link", "set", "ext0", "up"});
  EXPECT_TRUE(WaitForCall());
  Shell({"ip", "link", "add", "ext2", "type", "veth", "peer", "name", "ext3"});
  EXPECT_TRUE(WaitForCall());
  Shell({"ip", "addr", "del", "192.0.2.1/24", "dev", "ext0"});
  EXPECT_TRUE(WaitForCall());
}

TEST_F(LinkWatcherTest, TheIgnoredInterfacesAddressesDoNotCallBack) {
  RunPending();
  const int before = calls_;
  Shell({"ip", "addr", "add", "198.51.100.1/32", "dev", "vips0"});
  Shell({"ip", "addr", "add", "198.51.100.2/32", "dev", "vips0"});
  RunPending();
  EXPECT_EQ(calls_, before);
  // Recreated under the same name (a new index), it is still ignored (its peer is not).
  Shell({"ip", "link", "del", "vips0"});
  Shell({"ip", "link", "add", "vips0", "type", "veth", "peer", "name", "vips1"});
  RunPending();
  const int recreated = calls_;
  Shell({"ip", "addr", "add", "198.51.100.3/32", "dev", "vips0"});
  RunPending();
  EXPECT_EQ(calls_, recreated);
  Shell({"ip", "addr", "add", "192.0.2.9/24", "dev", "ext0"});
  EXPECT_TRUE(WaitForCall());
}

}  // namespace
}  // namespace sluice::vip
