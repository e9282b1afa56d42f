// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/socklb/probe.h"

#include <arpa/inet.h>
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/capabilities.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/net/socket.h"

#include "agent/dataplane/socklb/cgroup.h"

namespace sluice::socklb {
namespace {

const char kTestService[] = "sluice/self-test";

absl::Status Fail(const std::string& what) {
  return absl::InternalError(absl::StrCat("self-test: ", what));
}

// A blocking socket with 2 s timeouts: the self-test must not hang the start.
absl::StatusOr<base::UniqueFd> BlockingSocket(int type) {
  base::UniqueFd fd(socket(AF_INET, type | SOCK_CLOEXEC, 0));
  const timeval tv{.tv_sec = 2, .tv_usec = 0};
  if (!fd || setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return base::ErrnoStatus(errno, "self-test: socket");
  }
  return fd;
}

absl::Status Connect(int fd, const net::SocketAddress& to) {
  sockaddr_storage ss;
  const socklen_t len = to.ToSockaddr(&ss);
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("self-test: connect ", to.ToString()));
  }
  return absl::OkStatus();
}

absl::Status CheckTcp(const net::SocketAddress& front, const net::SocketAddress& refused) {
  ASSIGN_OR_RETURN(base::UniqueFd client, BlockingSocket(SOCK_STREAM));
  RETURN_IF_ERROR(Connect(client.get(), front));
  ASSIGN_OR_RETURN(net::SocketAddress peer, net::PeerAddress(client.get()));
  if (peer != front) {
    return Fail(absl::StrCat("getpeername reports ", peer.ToString(), ", not ", front.ToString()));
  }
  ASSIGN_OR_RETURN(base::UniqueFd other, BlockingSocket(SOCK_STREAM));
  sockaddr_storage ss;
  const socklen_t len = refused.ToSockaddr(&ss);
  const int rc = connect(other.get(), reinterpret_cast<sockaddr*>(&ss), len);
  if (rc == 0 || errno != ECONNREFUSED) {
    return Fail(absl::StrCat("a service without backends: want ECONNREFUSED, got ",
                             rc == 0 ? "a connection" : strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CheckUdp(const net::SocketAddress& front, int backend_fd) {
  ASSIGN_OR_RETURN(base::UniqueFd client, BlockingSocket(SOCK_DGRAM));
  sockaddr_storage ss;
  socklen_t len = front.ToSockaddr(&ss);
  if (sendto(client.get(), "q", 1, 0, reinterpret_cast<sockaddr*>(&ss), len) != 1) {
    return base::ErrnoStatus(errno, "self-test: sendto");
  }
  char c;
  sockaddr_storage from;
  socklen_t from_len = sizeof(from);
  if (recvfrom(backend_fd, &c, 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len) != 1) {
    return Fail("the UDP datagram did not reach the backend");
  }
  if (sendto(backend_fd, "a", 1, 0, reinterpret_cast<sockaddr*>(&from), from_len) != 1) {
    return base::ErrnoStatus(errno, "self-test: reply");
  }
  from_len = sizeof(from);
  if (recvfrom(client.get(), &c, 1, 0, reinterpret_cast<sockaddr*>(&from), &from_len) != 1) {
    return Fail("the UDP reply did not reach the client");
  }
  auto src = net::SocketAddress::FromSockaddr(reinterpret_cast<sockaddr*>(&from), from_len);
  if (!src || *src != front) {
    return Fail(absl::StrCat("the UDP reply comes from ", src ? src->ToString() : "?", ", not ",
                             front.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SelfTest(SocketLb& lb) {
  const net::IpAddress loopback = *net::IpAddress::Parse("127.0.0.1");
  ASSIGN_OR_RETURN(base::UniqueFd listener,
                   net::ListenTcp(net::SocketAddress(loopback, 0), false, 4));
  ASSIGN_OR_RETURN(net::SocketAddress backend, net::LocalAddress(listener.get()));
  ASSIGN_OR_RETURN(base::UniqueFd udp, BlockingSocket(SOCK_DGRAM));
  sockaddr_storage ss;
  socklen_t len = backend.ToSockaddr(&ss);
  if (bind(udp.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    return base::ErrnoStatus(errno, "self-test: bind udp");
  }
  // Untranslated, the frontend refuses (nothing listens there) and the refusing service
  // (our own listener's address) would connect: each outcome shows whether the hook ran.
  const net::SocketAddress front(*net::IpAddress::Parse("127.255.255.254"), backend.port());
  Service svc{.frontends = {{front, false}, {front, true}}, .backends = {backend}};
  Service none{.frontends = {{backend, false}}};
  RETURN_IF_ERROR(lb.Apply({{kTestService, svc}, {absl::StrCat(kTestService, "-refused"), none}}));
  absl::Status st = CheckTcp(front, backend);
  if (st.ok()) {
    st = CheckUdp(front, udp.get());
  }
  st.Update(lb.Apply(
      {{kTestService, std::nullopt}, {absl::StrCat(kTestService, "-refused"), std::nullopt}}));
  return st;
}

namespace {

ProbeResult Probe(SocketLb::Options options) {
  ProbeResult r;
  r.status = base::RequireCapabilities({{CAP_BPF, "CAP_BPF"}, {CAP_NET_ADMIN, "CAP_NET_ADMIN"}});
  if (!r.status.ok()) {
    r.reason = "permission";
    return r;
  }
  if (!options.cgroup.empty()) {
    // --socket-lb-cgroup=/host/cgroup, the host's /sys/fs/cgroup: on a hybrid host cgroup2 is
    // its unified/ directory.
    auto dir = ResolveCgroup2(options.cgroup);
    if (!dir.ok()) {
      r.reason = "cgroup";
      r.status = dir.status();
      return r;
    }
    if (*dir != options.cgroup) {
      LOG(INFO) << "socket LB: " << options.cgroup << " is not cgroup v2; attaching to " << *dir;
      options.cgroup = *dir;
    }
  } else {
    auto mount = FindCgroup2Mount();
    if (!mount.ok()) {
      r.reason = "cgroup";
      r.status = mount.status();
      return r;
    }
    options.cgroup = *mount;
    if (!IsHierarchyRoot(options.cgroup)) {
      // Seen in others' agents: a container's cgroup namespace makes its own cgroup look like
      // the root, and programs attached there never see the node's other processes.
      r.reason = "cgroup";
      r.status = absl::FailedPreconditionError(
          absl::StrCat(options.cgroup,
                       " is not the root of the cgroup v2 hierarchy (a container's cgroup "
                       "namespace?): mount the host's cgroup2 root and pass "
                       "--socket-lb-cgroup"));
      return r;
    }
  }
  auto lb = SocketLb::Create(options);
  if (!lb.ok()) {
    r.status = lb.status();
    const std::string msg(lb.status().message());
    r.reason = msg.find("bpffs") != std::string::npos    ? "bpffs"
               : absl::IsPermissionDenied(lb.status())   ? "permission"
               : absl::IsFailedPrecondition(lb.status()) ? "cgroup"
                                                         : "unsupported";
    return r;
  }
  if (!InCgroupSubtree(options.cgroup)) {
    LOG(INFO) << "socket LB: self-test skipped: this process is outside " << options.cgroup;
  } else if (r.status = SelfTest(**lb); !r.status.ok()) {
    r.reason = "self_test";
    return r;
  }
  r.lb = std::move(*lb);
  return r;
}

}  // namespace

ProbeResult ProbeSocketLb(SocketLb::Options options) {
  const std::string bpf_root = options.bpf_root;
  ProbeResult r = Probe(std::move(options));
  if (r.lb == nullptr && !bpf_root.empty()) {
    // Hooks an earlier agent pinned would go on translating with maps nobody updates: a backend
    // recreated with a new address would be unreachable from every pod (seen on a node). Off
    // must mean off.
    if (absl::Status st = SocketLb::Cleanup(bpf_root); !st.ok()) {
      LOG(ERROR) << "socket LB: removing what an earlier agent pinned: " << st;
    }
  }
  return r;
}

}  // namespace sluice::socklb
