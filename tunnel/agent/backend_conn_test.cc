// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/backend_conn.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <future>

#include "gtest/gtest.h"
#include "lib/event/loop_thread.h"

#include "tunnel/agent/fake_resolver.h"

namespace sluice::tunnel::agent {
namespace {

class Owner final : public BackendConn::Owner {
 public:
  void OnDialDone(BackendConn&, const std::string& error) override { dial.set_value(error); }
  void OnBackendData(BackendConn&, std::string) override {}
  void OnBackendDone(BackendConn&, absl::Status) override {}
  void OnBackendStalled(BackendConn&) override {}
  void OnBackendCredit(BackendConn&, int64_t) override {}
  std::promise<std::string> dial;
};

// Dials `address` on a fresh loop and returns the dial error ("" = connected).
std::string DialError(const std::string& address, const AllowList* allow = nullptr,
                      Resolver* fake = nullptr, base::Family<base::Counter>* denied = nullptr) {
  auto thread = event::LoopThread::Create("test").value();
  event::EventLoop* loop = &thread->loop();
  GetaddrinfoResolver real;
  Resolver& resolver = fake != nullptr ? *fake : real;
  Owner owner;
  DialPolicy policy;
  policy.timeout = absl::Seconds(2);
  policy.allow = allow;
  policy.denied = denied;
  std::shared_ptr<BackendConn> conn;
  loop->Post([&] {
    conn = std::make_shared<BackendConn>(*loop, resolver, owner, policy, 1, 1);
    conn->Dial(address, conn);
  });
  std::string err = owner.dial.get_future().get();
  std::promise<void> done;
  loop->Post([&] {
    conn.reset();
    done.set_value();
  });
  done.get_future().wait();
  return err;
}

int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(BackendConnTest, GoStyleErrors) {
  const std::string refused = "127.0.0.1:" + std::to_string(ClosedPort());
  EXPECT_EQ(DialError(refused), "dial tcp " + refused + ": connect: connection refused");
  EXPECT_EQ(DialError("nosuchhost.invalid:80"),
            "dial tcp: lookup nosuchhost.invalid: no such host");
  EXPECT_EQ(DialError("bad"), "dial tcp: address bad: missing port in address");
}

// A listening loopback port, so that only the allow list can make a dial to it fail.
class Listener {
 public:
  Listener() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_.get(), 8), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  base::UniqueFd fd_;
  uint16_t port_ = 0;
};

// A denied dial answers what a closed port answers upstream, and is counted by reason.
TEST(BackendConnTest, DeniedDialLooksRefusedAndIsCounted) {
  Listener open;
  base::Registry registry;
  auto& denied = registry.AddCounter("denied", "", {"reason"});
  auto by_default = AllowList::Parse({}).value();
  EXPECT_EQ(DialError(open.Address(), &by_default, nullptr, &denied),
            "dial tcp " + open.Address() + ": connect: connection refused");
  EXPECT_EQ(DialError("169.254.169.254:80", &by_default, nullptr, &denied),
            "dial tcp 169.254.169.254:80: connect: connection refused");
  auto listed = AllowList::Parse({"10.0.0.0/8"}).value();
  EXPECT_EQ(DialError(open.Address(), &listed, nullptr, &denied),
            "dial tcp " + open.Address() + ": connect: connection refused");
  EXPECT_EQ(denied.WithLabels({"loopback"}).Value(), 2);
  EXPECT_EQ(denied.WithLabels({"link_local"}).Value(), 1);
  auto opened = AllowList::Parse({"127.0.0.1/32"}).value();
  EXPECT_EQ(DialError(open.Address(), &opened), "");
}

// The allow list is consulted before a name is resolved, as far as it can be: a name on a port
// no entry allows is refused without a lookup; on an allowed port the resolved address decides.
TEST(BackendConnTest, DeniedNameIsNeverResolved) {
  auto allow = AllowList::Parse({"10.0.0.0/8:443"}).value();
  FakeResolver resolver;
  resolver.Add("kubelet.internal", *net::IpAddress::Parse("10.1.2.3"));
  resolver.Add("elsewhere.internal", *net::IpAddress::Parse("192.0.2.1"));
  EXPECT_EQ(DialError("kubelet.internal:22", &allow, &resolver),
            "dial tcp kubelet.internal:22: connect: connection refused");
  EXPECT_EQ(DialError("secret.exfil.example:80", &allow, &resolver),
            "dial tcp secret.exfil.example:80: connect: connection refused");
  EXPECT_TRUE(resolver.asked().empty());
  EXPECT_EQ(DialError("elsewhere.internal:443", &allow, &resolver),
            "dial tcp 192.0.2.1:443: connect: connection refused");
  EXPECT_EQ(resolver.asked(), std::vector<std::string>{"elsewhere.internal"});
}

TEST(BackendConnTest, SplitHostPort) {
  std::string h;
  uint16_t p;
  ASSERT_TRUE(SplitHostPort("[::1]:80", &h, &p));
  EXPECT_EQ(h, "::1");
  EXPECT_EQ(p, 80);
  EXPECT_FALSE(SplitHostPort("::1:80", &h, &p));
  EXPECT_FALSE(SplitHostPort("a:0", &h, &p));
}

}  // namespace
}  // namespace sluice::tunnel::agent
