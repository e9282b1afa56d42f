// SPDX-License-Identifier: Apache-2.0
// The startup self-test of --external-datapath=auto (ExtNat's SelfTest in ext_nat.h).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"
#include "lib/net/socket.h"

#include "agent/dataplane/extnat/ext_nat.h"
#include "agent/dataplane/extnat/scratch_net.h"

namespace sluice::extnat {
namespace {

// A node namespace with the programs on its veth end, a client namespace behind the other, and
// a backend on the node (TEST-NET-1 addresses: nothing outside these namespaces sees them).
constexpr char kNodeDevice[] = "sluice-st0";
constexpr char kClientDevice[] = "sluice-st1";
constexpr char kClient[] = "192.0.2.1";
constexpr char kNode[] = "192.0.2.2";     // the frontends' address (a node address)
constexpr char kBackend[] = "192.0.2.3";  // a local backend's
// Loopback-fast in practice; the bound is for a loaded machine.
constexpr absl::Duration kPatience = absl::Seconds(1);

net::SocketAddress At(const char* ip, uint16_t port) {
  return net::SocketAddress(*net::IpAddress::Parse(ip), port);
}
net::Cidr Prefix(const char* ip, int len) {
  return *net::Cidr::Make(*net::IpAddress::Parse(ip), len);
}

// Moves the calling thread into a new network namespace and returns it.
absl::StatusOr<base::UniqueFd> NewNetNs() {
  if (unshare(CLONE_NEWNET) != 0) {
    return base::ErrnoStatus(errno, "unshare(CLONE_NEWNET)");
  }
  base::UniqueFd fd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return base::ErrnoStatus(errno, "open(/proc/thread-self/ns/net)");
  }
  return fd;
}

absl::Status Enter(const base::UniqueFd& ns) {
  if (setns(ns.get(), CLONE_NEWNET) != 0) {
    return base::ErrnoStatus(errno, "setns(CLONE_NEWNET)");
  }
  return absl::OkStatus();
}

absl::Status Wait(int fd, short events, absl::Time deadline, const char* what) {
  pollfd p{.fd = fd, .events = events};
  for (;;) {
    const int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::max(deadline - absl::Now(), absl::ZeroDuration())));
    const int n = poll(&p, 1, ms);
    if (n > 0) {
      return absl::OkStatus();
    }
    if (n == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": nothing after ", absl::FormatDuration(kPatience)));
    }
    if (errno != EINTR) {
      return base::ErrnoStatus(errno, what);
    }
  }
}

// The two namespaces joined by a veth pair; the thread ends in the node's.
absl::Status BuildNet(base::UniqueFd& client_ns, base::UniqueFd& node_ns) {
  ASSIGN_OR_RETURN(client_ns, NewNetNs());
  ASSIGN_OR_RETURN(node_ns, NewNetNs());
  RETURN_IF_ERROR(scratch::AddVeth(kNodeDevice, kClientDevice, client_ns.get()));
  RETURN_IF_ERROR(scratch::AddAddress(kNodeDevice, Prefix(kNode, 24)));
  RETURN_IF_ERROR(scratch::AddAddress(kNodeDevice, Prefix(kBackend, 32)));
  RETURN_IF_ERROR(scratch::SetUp(kNodeDevice));
  RETURN_IF_ERROR(Enter(client_ns));
  RETURN_IF_ERROR(scratch::AddAddress(kClientDevice, Prefix(kClient, 24)));
  RETURN_IF_ERROR(scratch::SetUp(kClientDevice));
  return Enter(node_ns);
}

// A connect to the frontend must complete at the client (the SYN translated, the SYN-ACK
// translated back; untranslated, the node refuses it at once) and be accepted by the backend
// from the client's address.
absl::Status CheckTcp(int listener, int client, absl::Time deadline) {
  RETURN_IF_ERROR(Wait(client, POLLOUT, deadline, "TCP: the client's connect"));
  if (int err = net::SocketError(client); err != 0) {
    return base::ErrnoStatus(err, absl::StrCat("TCP: the client's connect to ", kNode, ":80"));
  }
  RETURN_IF_ERROR(Wait(listener, POLLIN, deadline, "TCP: the backend got no connection"));
  base::UniqueFd conn(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!conn) {
    return base::ErrnoStatus(errno, "TCP: accept");
  }
  ASSIGN_OR_RETURN(const net::SocketAddress peer, net::PeerAddress(conn.get()));
  if (peer.ip() != *net::IpAddress::Parse(kClient)) {
    return absl::InternalError(absl::StrCat("TCP: the backend sees ", peer.ToString(),
                                            ", not the client's address ", kClient));
  }
  return absl::OkStatus();
}

// A datagram to the frontend must reach the backend from the client, and its answer come back
// from the frontend.
absl::Status CheckUdp(int backend, int client, absl::Time deadline) {
  RETURN_IF_ERROR(Wait(backend, POLLIN, deadline, "UDP: the backend got no datagram"));
  char buf[64];
  sockaddr_storage from{};
  socklen_t len = sizeof(from);
  const ssize_t n =
      recvfrom(backend, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
  if (n < 0) {
    return base::ErrnoStatus(errno, "UDP: recvfrom at the backend");
  }
  auto source = net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), len);
  if (!source || source->ip() != *net::IpAddress::Parse(kClient)) {
    return absl::InternalError(absl::StrCat("UDP: the backend sees ",
                                            source ? source->ToString() : "?",
                                            ", not the client's address ", kClient));
  }
  if (sendto(backend, buf, n, 0, reinterpret_cast<sockaddr*>(&from), len) < 0) {
    return base::ErrnoStatus(errno, "UDP: the backend's answer");
  }
  RETURN_IF_ERROR(Wait(client, POLLIN, deadline, "UDP: the client got no answer"));
  len = sizeof(from);
  if (recvfrom(client, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len) < 0) {
    return base::ErrnoStatus(errno, "UDP: recvfrom at the client");
  }
  source = net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), len);
  if (!source || *source != At(kNode, 53)) {
    return absl::InternalError(absl::StrCat(
        "UDP: the answer comes from ", source ? source->ToString() : "?", ", not ", kNode, ":53"));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  base::UniqueFd client_ns, node_ns;
  RETURN_IF_ERROR(BuildNet(client_ns, node_ns));
  // Small maps: quick to allocate, and nothing here needs more.
  LoadOptions options;
  options.max_frontends = options.max_slots = options.max_affinity = 16;
  options.max_flows = 64;
  ASSIGN_OR_RETURN(std::unique_ptr<ExtNat> nat, ExtNat::Create(options));
  RETURN_IF_ERROR(nat->SetDevices({kNodeDevice}));
  Service tcp{.frontends = {{At(kNode, 80), false}}, .backends = {At(kBackend, 8080)}};
  Service udp{.frontends = {{At(kNode, 53), true}}, .backends = {At(kBackend, 5353)}};
  RETURN_IF_ERROR(nat->Apply({{"self-test/tcp", tcp}, {"self-test/udp", udp}}));
  ASSIGN_OR_RETURN(base::UniqueFd listener, net::ListenTcp(At(kBackend, 8080), false, 4));
  ASSIGN_OR_RETURN(base::UniqueFd backend, net::BindUdp(At(kBackend, 5353), false));

  RETURN_IF_ERROR(Enter(client_ns));  // the clients' sockets belong to its namespace
  ASSIGN_OR_RETURN(base::UniqueFd client_udp, net::BindUdp(At(kClient, 0), false));
  ASSIGN_OR_RETURN(base::UniqueFd client_tcp, net::DialTcp(At(kNode, 80)));
  sockaddr_storage to;
  const socklen_t to_len = At(kNode, 53).ToSockaddr(&to);
  constexpr char kProbe[] = "sluice self-test";
  if (sendto(client_udp.get(), kProbe, sizeof(kProbe), 0, reinterpret_cast<sockaddr*>(&to),
             to_len) < 0) {
    return base::ErrnoStatus(errno, "UDP: sendto the frontend");
  }
  const absl::Time deadline = absl::Now() + kPatience;
  RETURN_IF_ERROR(CheckTcp(listener.get(), client_tcp.get(), deadline));
  return CheckUdp(backend.get(), client_udp.get(), deadline);
}

}  // namespace

absl::Status SelfTest() {
  // Network namespaces are per thread: a thread of its own keeps the agent's threads on the
  // host's, and when it ends the scratch namespaces (and everything in them) go with it.
  absl::Status result;
  std::thread([&result] { result = Run(); }).join();
  if (!result.ok()) {
    return absl::Status(result.code(), absl::StrCat("external NAT self-test: ", result.message()));
  }
  return absl::OkStatus();
}

}  // namespace sluice::extnat
