// SPDX-License-Identifier: Apache-2.0
#include "lib/net/socket.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>

#include "lib/base/status.h"

namespace sluice::net {
namespace {

absl::Status SetIntOption(int fd, int level, int name, int value, const char* what) {
  if (setsockopt(fd, level, name, &value, sizeof(value)) != 0) {
    return base::ErrnoStatus(errno, std::string("setsockopt(") + what + ")");
  }
  return absl::OkStatus();
}

// Creates a socket of `type` for addr's family with the options every bound socket shares.
absl::StatusOr<base::UniqueFd> NewBoundSocket(const SocketAddress& addr, int type, bool reuseport) {
  const bool v4 = addr.ip().is_v4();
  base::UniqueFd fd(socket(v4 ? AF_INET : AF_INET6, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket");
  }
  // SO_REUSEADDR: rebinding a port with TIME_WAIT children after a restart or port change.
  RETURN_IF_ERROR(SetIntOption(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR"));
  if (reuseport) {
    RETURN_IF_ERROR(SetIntOption(fd.get(), SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT"));
  }
  if (v4) {
    RETURN_IF_ERROR(SetIntOption(fd.get(), IPPROTO_IP, IP_FREEBIND, 1, "IP_FREEBIND"));
  } else {
    RETURN_IF_ERROR(SetIntOption(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, 1, "IPV6_V6ONLY"));
    // IPV6_FREEBIND exists since Linux 4.15; older kernels would need IP_FREEBIND on a v6 socket.
    RETURN_IF_ERROR(SetIntOption(fd.get(), IPPROTO_IPV6, IPV6_FREEBIND, 1, "IPV6_FREEBIND"));
  }
  sockaddr_storage ss;
  socklen_t len = addr.ToSockaddr(&ss);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    return base::ErrnoStatus(errno, "bind " + addr.ToString());
  }
  return fd;
}

absl::StatusOr<SocketAddress> NameOf(int fd, bool peer) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const char* op = peer ? "getpeername" : "getsockname";
  if (rc != 0) {
    return base::ErrnoStatus(errno, std::string(op) + " fd " + std::to_string(fd));
  }
  auto addr = SocketAddress::FromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
  if (!addr) {
    return absl::InvalidArgumentError(std::string(op) + " fd " + std::to_string(fd) +
                                      ": not an IP socket");
  }
  return *addr;
}

}  // namespace

absl::StatusOr<base::UniqueFd> ListenTcp(const SocketAddress& addr, bool reuseport, int backlog) {
  ASSIGN_OR_RETURN(base::UniqueFd fd, NewBoundSocket(addr, SOCK_STREAM, reuseport));
  // Inherited by accepted sockets (the child is a copy of the listener): one call per listener
  // instead of one per connection.
  RETURN_IF_ERROR(SetTcpNoDelay(fd.get()));
  if (listen(fd.get(), backlog) != 0) {
    return base::ErrnoStatus(errno, "listen " + addr.ToString());
  }
  return fd;
}

absl::StatusOr<base::UniqueFd> BindUdp(const SocketAddress& addr, bool reuseport) {
  ASSIGN_OR_RETURN(base::UniqueFd fd, NewBoundSocket(addr, SOCK_DGRAM, reuseport));
  if (addr.ip().is_v4()) {
    RETURN_IF_ERROR(SetIntOption(fd.get(), IPPROTO_IP, IP_PKTINFO, 1, "IP_PKTINFO"));
  } else {
    RETURN_IF_ERROR(SetIntOption(fd.get(), IPPROTO_IPV6, IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO"));
  }
  return fd;
}

absl::StatusOr<base::UniqueFd> DialTcp(const SocketAddress& addr) {
  base::UniqueFd fd(socket(addr.ip().is_v4() ? AF_INET : AF_INET6,
                           SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket");
  }
  RETURN_IF_ERROR(SetTcpNoDelay(fd.get()));
  sockaddr_storage ss;
  socklen_t len = addr.ToSockaddr(&ss);
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), len);
  } while (rc != 0 && errno == EINTR);
  // EINTR is retried above; on a non-blocking socket a connect that cannot finish at once
  // reports EINPROGRESS (man 2 connect).
  if (rc != 0 && errno != EINPROGRESS) {
    return base::ErrnoStatus(errno, "connect " + addr.ToString());
  }
  return fd;
}

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return errno;
  }
  return err;
}

absl::StatusOr<SocketAddress> LocalAddress(int fd) { return NameOf(fd, /*peer=*/false); }
absl::StatusOr<SocketAddress> PeerAddress(int fd) { return NameOf(fd, /*peer=*/true); }

absl::Status SetTcpNoDelay(int fd) {
  return SetIntOption(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY");
}

absl::Status SetLingerZero(int fd) {
  linger lg{.l_onoff = 1, .l_linger = 0};
  if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) != 0) {
    return base::ErrnoStatus(errno, "setsockopt(SO_LINGER)");
  }
  return absl::OkStatus();
}

}  // namespace sluice::net
