// SPDX-License-Identifier: Apache-2.0
// NetlinkVipManager against the real kernel, inside a network namespace of the test's own.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/strings.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"

#include "agent/dataplane/vip/netlink_vip_manager.h"
#include "tests/testutil/netns.h"
#include "tests/testutil/process.h"

namespace sluice::vip {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

net::IpAddress Ip(std::string_view text) { return *net::IpAddress::Parse(text); }

ino_t ThreadNetNsInode() {
  struct stat st {};
  return stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

// Runs a command (inside the test's namespace: children inherit the thread's) and expects
// success.
std::string Shell(std::vector<std::string> argv) {
  std::string output;
  const std::string text = absl::StrJoin(argv, " ");
  EXPECT_EQ(testutil::RunCommand(std::move(argv), &output), 0) << text << ": " << output;
  return output;
}

// The `ip -o addr` line for ip on dev, or "" if dev does not have it.
std::string AddressLine(std::string_view ip, const std::string& dev) {
  std::string output;
  testutil::RunCommand({"ip", "-o", "addr", "show", "dev", dev}, &output);
  std::istringstream lines(output);
  const std::string needle = absl::StrCat(" ", base::Absl(ip), "/");
  for (std::string line; std::getline(lines, line);) {
    if (absl::StrContains(line, needle)) {
      return line;
    }
  }
  return "";
}

// Listens on ip, port 0, connects to it and moves one byte across. `freebind` binds as the agent
// does: IPv6 bind() accepts only assigned addresses, not ones a local route covers.
testing::AssertionResult Connectable(const net::IpAddress& ip, bool freebind = false) {
  const int family = ip.family();
  base::UniqueFd listener(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1;
  if (freebind && setsockopt(listener.get(), IPPROTO_IPV6, IPV6_FREEBIND, &on, sizeof(on)) < 0) {
    return testing::AssertionFailure() << "IPV6_FREEBIND: " << strerror(errno);
  }
  sockaddr_storage storage{};
  socklen_t len = net::SocketAddress(ip, 0).ToSockaddr(&storage);
  auto* sa = reinterpret_cast<sockaddr*>(&storage);
  if (bind(listener.get(), sa, len) < 0 || listen(listener.get(), 1) < 0 ||
      getsockname(listener.get(), sa, &len) < 0) {
    return testing::AssertionFailure() << "listen on " << ip.ToString() << ": " << strerror(errno);
  }
  // An IPv6 address's local route is inserted from the addrconf workqueue moments after the
  // address (even with IFA_F_NODAD): until then connect() fails ENETUNREACH.
  base::UniqueFd client;
  int rc = -1;
  for (int tries = 0; rc < 0 && tries < 500; ++tries) {
    if (tries > 0) {
      if (errno != ENETUNREACH) {
        break;
      }
      usleep(10'000);
    }
    client.Reset(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    rc = connect(client.get(), sa, len);
  }
  if (rc < 0) {
    return testing::AssertionFailure() << "connect " << ip.ToString() << ": " << strerror(errno);
  }
  base::UniqueFd server(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  char byte = 'x';
  if (!server || write(client.get(), &byte, 1) != 1 || read(server.get(), &byte, 1) != 1) {
    return testing::AssertionFailure()
           << "exchange on " << ip.ToString() << ": " << strerror(errno);
  }
  return testing::AssertionSuccess();
}

class NetlinkVipManagerTest : public testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root (CAP_SYS_ADMIN for unshare, CAP_NET_ADMIN for addresses)";
    }
    original_netns_ = ThreadNetNsInode();
    absl::StatusOr<std::unique_ptr<testutil::NetNs>> netns = testutil::NetNs::Create();
    if (absl::IsPermissionDenied(netns.status())) {
      GTEST_SKIP() << "needs CAP_SYS_ADMIN and CAP_NET_ADMIN: " << netns.status();
    }
    ASSERT_TRUE(netns.ok()) << netns.status();
    netns_ = *std::move(netns);
    if (testutil::RunCommand({"ip", "-V"}) != 0) {
      GTEST_SKIP() << "needs iproute2's ip";
    }
    // The kernel decides the default interface; the tests accept either outcome.
    dummy_supported_ = testutil::RunCommand({"ip", "link", "add", "probe0", "type", "dummy"}) == 0;
    if (dummy_supported_) {
      Shell({"ip", "link", "del", "probe0"});
    }
  }

  void TearDown() override {
    manager_.reset();  // Its netlink socket pins the namespace.
    netns_.reset();
    if (original_netns_ != 0) {
      EXPECT_EQ(ThreadNetNsInode(), original_netns_);
    }
  }

  std::unique_ptr<NetlinkVipManager> Create(std::string interface_name = "",
                                            const std::vector<std::string>& local_ranges = {}) {
    std::vector<net::Cidr> ranges;
    ranges.reserve(local_ranges.size());
    for (const std::string& r : local_ranges) {
      ranges.push_back(*net::Cidr::Parse(r));
    }
    absl::StatusOr<std::unique_ptr<NetlinkVipManager>> manager =
        NetlinkVipManager::Create(std::move(interface_name), std::move(ranges));
    EXPECT_TRUE(manager.ok()) << manager.status();
    return manager.ok() ? *std::move(manager) : nullptr;
  }

  ino_t original_netns_ = 0;
  std::unique_ptr<testutil::NetNs> netns_;
  bool dummy_supported_ = false;
  std::unique_ptr<NetlinkVipManager> manager_;
};

TEST_F(NetlinkVipManagerTest, DefaultInterfaceIsDummyOrLoopback) {
  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  if (dummy_supported_) {
    EXPECT_EQ(manager_->interface_name(), "sluice0");
    EXPECT_THAT(Shell({"ip", "-o", "link", "show", "sluice0"}), HasSubstr(",UP"));
    // A second instance reuses the link.
    EXPECT_EQ(Create()->interface_name(), "sluice0");
  } else {
    EXPECT_EQ(manager_->interface_name(), "lo");
  }
}

TEST_F(NetlinkVipManagerTest, MissingInterfaceIsNotFound) {
  absl::StatusOr<std::unique_ptr<NetlinkVipManager>> manager = NetlinkVipManager::Create("nope0");
  EXPECT_TRUE(absl::IsNotFound(manager.status())) << manager.status();
  EXPECT_THAT(std::string(manager.status().message()), HasSubstr("nope0"));
}

TEST_F(NetlinkVipManagerTest, EnsureAddsConnectableV4AndV6) {
  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  const std::string dev = manager_->interface_name();
  ASSERT_TRUE(manager_->Ensure(Ip("10.96.0.10")).ok());
  ASSERT_TRUE(manager_->Ensure(Ip("fd00:96::10")).ok());
  EXPECT_TRUE(manager_->Ensure(Ip("10.96.0.10")).ok());  // Idempotent.

  EXPECT_THAT(AddressLine("10.96.0.10", dev),
              HasSubstr(absl::StrCat("10.96.0.10/32 scope host ", dev, ":sluice")));
  EXPECT_THAT(AddressLine("fd00:96::10", dev), HasSubstr("fd00:96::10/128 scope global nodad"));
  EXPECT_THAT(manager_->Owned(), UnorderedElementsAre(Ip("10.96.0.10"), Ip("fd00:96::10")));
  EXPECT_TRUE(Connectable(Ip("10.96.0.10")));
  EXPECT_TRUE(Connectable(Ip("fd00:96::10")));
  EXPECT_EQ(manager_->Ensure(Ip("0.0.0.0")).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NetlinkVipManagerTest, NeverOwnsOrRemovesAddressesItDidNotAdd) {
  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  Shell({"ip", "addr", "add", "10.96.0.77/32", "dev", "lo"});
  Shell({"ip", "addr", "add", "fd00:96::77/128", "dev", "lo"});
  for (const char* ip : {"127.0.0.1", "127.0.0.53", "::1", "10.96.0.77", "fd00:96::77"}) {
    EXPECT_TRUE(manager_->Ensure(Ip(ip)).ok()) << ip;
  }
  EXPECT_THAT(manager_->Owned(), IsEmpty());
  EXPECT_EQ(AddressLine("127.0.0.53", "lo"), "");  // Local through 127/8 already; not added.

  EXPECT_TRUE(manager_->Release(Ip("10.96.0.77")).ok());
  EXPECT_TRUE(manager_->Release(Ip("127.0.0.1")).ok());
  EXPECT_TRUE(manager_->Reconcile({}).ok());
  EXPECT_TRUE(manager_->RemoveAll().ok());
  for (const char* ip : {"127.0.0.1", "::1", "10.96.0.77", "fd00:96::77"}) {
    EXPECT_NE(AddressLine(ip, "lo"), "") << ip << " was removed";
  }
}

TEST_F(NetlinkVipManagerTest, ReleaseRemovesOnlyOurs) {
  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  const std::string dev = manager_->interface_name();
  Shell({"ip", "addr", "add", "10.96.0.77/32", "dev", "lo"});
  ASSERT_TRUE(manager_->Ensure(Ip("10.96.0.11")).ok());
  ASSERT_TRUE(manager_->Ensure(Ip("fd00:96::11")).ok());

  EXPECT_TRUE(manager_->Release(Ip("10.96.0.11")).ok());
  EXPECT_TRUE(manager_->Release(Ip("fd00:96::11")).ok());
  EXPECT_TRUE(manager_->Release(Ip("10.96.0.77")).ok());
  EXPECT_TRUE(manager_->Release(Ip("10.96.0.11")).ok());  // Twice is fine.
  EXPECT_EQ(AddressLine("10.96.0.11", dev), "");
  EXPECT_EQ(AddressLine("fd00:96::11", dev), "");
  EXPECT_NE(AddressLine("10.96.0.77", "lo"), "");
  EXPECT_THAT(manager_->Owned(), IsEmpty());
}

// A crash leaves addresses behind; the next instance recognises them by their marks (IFA_PROTO,
// and the label on IPv4) and removes the stale ones, never someone else's.
TEST_F(NetlinkVipManagerTest, ReconcileAfterRestartRemovesLeftoversOnly) {
  std::unique_ptr<NetlinkVipManager> previous = Create();
  ASSERT_NE(previous, nullptr);
  const std::string dev = previous->interface_name();
  for (const char* ip : {"10.96.0.20", "fd00:96::20", "10.96.0.21", "fd00:96::21"}) {
    ASSERT_TRUE(previous->Ensure(Ip(ip)).ok()) << ip;
  }
  previous.reset();  // No cleanup, as after a crash.
  EXPECT_NE(AddressLine("10.96.0.20", dev), "");
  Shell({"ip", "addr", "add", "10.96.0.77/32", "dev", "lo"});
  Shell({"ip", "addr", "add", "fd00:96::77/128", "dev", "lo"});

  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  EXPECT_THAT(manager_->Owned(), IsEmpty());
  const absl::flat_hash_set<net::IpAddress> wanted = {Ip("10.96.0.21"), Ip("fd00:96::21"),
                                                      Ip("10.96.0.22"), Ip("fd00:96::22")};
  ASSERT_TRUE(manager_->Reconcile(wanted).ok());
  EXPECT_EQ(AddressLine("10.96.0.20", dev), "");
  EXPECT_EQ(AddressLine("fd00:96::20", dev), "");
  for (const char* ip : {"10.96.0.21", "fd00:96::21", "10.96.0.22", "fd00:96::22"}) {
    EXPECT_NE(AddressLine(ip, dev), "") << ip;
  }
  EXPECT_NE(AddressLine("10.96.0.77", "lo"), "");
  EXPECT_NE(AddressLine("fd00:96::77", "lo"), "");
  EXPECT_EQ(manager_->Owned(), wanted);  // Adopted and added alike.
  EXPECT_TRUE(Connectable(Ip("fd00:96::22")));

  ASSERT_TRUE(manager_->Reconcile(wanted).ok());  // Converged: a no-op.
  EXPECT_TRUE(manager_->RemoveAll().ok());
  EXPECT_THAT(manager_->Owned(), IsEmpty());
  for (const char* ip : {"10.96.0.21", "fd00:96::21", "10.96.0.22", "fd00:96::22"}) {
    EXPECT_EQ(AddressLine(ip, dev), "") << ip;
  }
  EXPECT_NE(AddressLine("10.96.0.77", "lo"), "");
  EXPECT_NE(AddressLine("fd00:96::77", "lo"), "");
  EXPECT_NE(AddressLine("127.0.0.1", "lo"), "");
}

// On a link that does Duplicate Address Detection, IFA_F_NODAD makes an IPv6 VIP bindable at
// once. Also covers an explicit --vip-interface that is down, and moving VIPs between links.
TEST_F(NetlinkVipManagerTest, ExplicitInterfaceVethNoDadAndMove) {
  Shell({"ip", "link", "add", "vip0", "type", "veth", "peer", "name", "vip1"});
  Shell({"ip", "link", "set", "vip1", "up"});
  std::unique_ptr<NetlinkVipManager> on_veth = Create("vip0");
  ASSERT_NE(on_veth, nullptr);
  EXPECT_THAT(Shell({"ip", "-o", "link", "show", "vip0"}), HasSubstr(",UP"));
  ASSERT_TRUE(on_veth->Ensure(Ip("fd00:96::30")).ok());
  ASSERT_TRUE(on_veth->Ensure(Ip("10.96.0.30")).ok());
  EXPECT_THAT(AddressLine("fd00:96::30", "vip0"), Not(HasSubstr("tentative")));
  EXPECT_TRUE(Connectable(Ip("fd00:96::30")));
  EXPECT_THAT(AddressLine("10.96.0.30", "vip0"), HasSubstr("vip0:sluice"));
  on_veth.reset();

  // Sluice restarted with another interface: its VIPs move.
  manager_ = Create("lo");
  ASSERT_NE(manager_, nullptr);
  ASSERT_TRUE(manager_->Reconcile({Ip("fd00:96::30"), Ip("10.96.0.30")}).ok());
  EXPECT_EQ(AddressLine("fd00:96::30", "vip0"), "");
  EXPECT_EQ(AddressLine("10.96.0.30", "vip0"), "");
  EXPECT_NE(AddressLine("fd00:96::30", "lo"), "");
  EXPECT_THAT(AddressLine("10.96.0.30", "lo"), HasSubstr("lo:sluice"));
}

// Between full scans Reconcile works from what it owns; a change made behind its back is
// repaired by the next full scan (MarkStale, the periodic resync) or after a failure.
TEST_F(NetlinkVipManagerTest, ReconcileWithoutScanAndRepairWhenStale) {
  manager_ = Create();
  ASSERT_NE(manager_, nullptr);
  const std::string dev = manager_->interface_name();
  Shell({"ip", "addr", "add", "10.96.0.77/32", "dev", "lo"});  // someone else's
  ASSERT_TRUE(manager_->Reconcile({Ip("10.96.0.40"), Ip("fd00:96::40"), Ip("10.96.0.77")}).ok());
  EXPECT_THAT(manager_->Owned(), UnorderedElementsAre(Ip("10.96.0.40"), Ip("fd00:96::40")));

  // Incremental: adds and removes without a scan, and still never owns someone else's address.
  ASSERT_TRUE(manager_->Reconcile({Ip("10.96.0.41"), Ip("fd00:96::40"), Ip("10.96.0.77")}).ok());
  EXPECT_THAT(manager_->Owned(), UnorderedElementsAre(Ip("10.96.0.41"), Ip("fd00:96::40")));
  EXPECT_EQ(AddressLine("10.96.0.40", dev), "");
  EXPECT_NE(AddressLine("10.96.0.41", dev), "");
  EXPECT_NE(AddressLine("10.96.0.77", "lo"), "");
  EXPECT_TRUE(Connectable(Ip("10.96.0.41")));

  // Removed behind our back: an incremental Reconcile does not notice...
  const absl::flat_hash_set<net::IpAddress> wanted = {Ip("10.96.0.41"), Ip("fd00:96::40")};
  Shell({"ip", "addr", "del", "10.96.0.41/32", "dev", dev});
  ASSERT_TRUE(manager_->Reconcile(wanted).ok());
  EXPECT_EQ(AddressLine("10.96.0.41", dev), "");
  // ...the full scan after MarkStale puts it back.
  manager_->MarkStale();
  ASSERT_TRUE(manager_->Reconcile(wanted).ok());
  EXPECT_NE(AddressLine("10.96.0.41", dev), "");
  EXPECT_EQ(manager_->Owned(), wanted);

  EXPECT_TRUE(manager_->RemoveAll().ok());
  EXPECT_NE(AddressLine("10.96.0.77", "lo"), "");
}

// With local ranges (--service-cluster-ip-range), VIPs inside them are local through one route
// each and get no address; those outside still do. A restart with other ranges swaps the routes
// and the clean-shutdown path removes them.
TEST_F(NetlinkVipManagerTest, LocalRangesReplaceAddressesInside) {
  // An earlier run without ranges left an address for a VIP that a range now covers.
  std::unique_ptr<NetlinkVipManager> previous = Create("lo");
  ASSERT_TRUE(previous->Reconcile({Ip("10.96.0.21")}).ok());
  ASSERT_NE(AddressLine("10.96.0.21", "lo"), "");
  previous.reset();

  manager_ = Create("lo", {"10.96.0.0/16", "fd00:96::/112"});
  ASSERT_NE(manager_, nullptr);
  const std::string routes = Shell({"ip", "-d", "route", "show", "table", "local"}) +
                             Shell({"ip", "-6", "-d", "route", "show", "table", "local"});
  EXPECT_THAT(routes, HasSubstr("local 10.96.0.0/16 dev lo proto 83 scope host")) << routes;
  EXPECT_THAT(routes, HasSubstr("local fd00:96::/112 dev lo proto 83")) << routes;
  ASSERT_TRUE(manager_->Reconcile({Ip("10.96.0.21"), Ip("fd00:96::21"), Ip("10.97.0.5")}).ok());
  EXPECT_EQ(AddressLine("10.96.0.21", "lo"), "");  // the earlier run's address is gone
  EXPECT_EQ(AddressLine("fd00:96::21", "lo"), "");
  EXPECT_NE(AddressLine("10.97.0.5", "lo"), "");  // outside every range
  EXPECT_THAT(manager_->Owned(), UnorderedElementsAre(Ip("10.97.0.5")));
  // The next sync works from what it owns (no scan): same rule.
  ASSERT_TRUE(manager_
                  ->Reconcile({Ip("10.96.0.21"), Ip("fd00:96::21"), Ip("10.97.0.5"),
                               Ip("10.96.0.22"), Ip("10.97.0.6")})
                  .ok());
  EXPECT_EQ(AddressLine("10.96.0.22", "lo"), "");
  EXPECT_NE(AddressLine("10.97.0.6", "lo"), "");
  EXPECT_THAT(manager_->Owned(), UnorderedElementsAre(Ip("10.97.0.5"), Ip("10.97.0.6")));
  EXPECT_TRUE(manager_->Ensure(Ip("10.96.3.3")).ok());
  EXPECT_TRUE(Connectable(Ip("10.96.0.21")));
  EXPECT_TRUE(Connectable(Ip("10.96.200.9")));  // any address in the range
  EXPECT_TRUE(Connectable(Ip("fd00:96::21"), /*freebind=*/true));
  EXPECT_TRUE(Connectable(Ip("10.97.0.5")));
  manager_.reset();

  // Restarted with another range (a --keep-vips restart): the old route goes, the new one comes.
  manager_ = Create("lo", {"10.100.0.0/16"});
  ASSERT_NE(manager_, nullptr);
  std::string now = Shell({"ip", "route", "show", "table", "local", "proto", "83"}) +
                    Shell({"ip", "-6", "route", "show", "table", "local", "proto", "83"});
  EXPECT_THAT(now, Not(HasSubstr("10.96.0.0/16")));
  EXPECT_THAT(now, Not(HasSubstr("fd00:96::/112")));
  EXPECT_THAT(now, HasSubstr("10.100.0.0/16"));
  ASSERT_TRUE(manager_->Reconcile({Ip("10.97.0.5")}).ok());  // adopted, still wanted; .6 goes
  EXPECT_TRUE(manager_->RemoveAll().ok());
  now = Shell({"ip", "route", "show", "table", "local", "proto", "83"});
  EXPECT_EQ(now, "");
  EXPECT_EQ(AddressLine("10.97.0.5", "lo"), "");
}

TEST_F(NetlinkVipManagerTest, LocalRangeWithHostBitsIsRefused) {
  auto manager = NetlinkVipManager::Create("lo", {*net::Cidr::Parse("10.96.0.1/16")});
  ASSERT_FALSE(manager.ok());
  EXPECT_THAT(std::string(manager.status().message()), HasSubstr("did you mean 10.96.0.0/16?"));
}

}  // namespace
}  // namespace sluice::vip
