// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"
#include "lib/net/address.h"

// Socket construction and small option helpers shared by listeners, dialers and sessions. Every
// socket is created SOCK_NONBLOCK|SOCK_CLOEXEC. Error messages read "<op> <address>: <cause>".
// Thread-safe (stateless).

namespace sluice::net {

// A listening TCP socket with SO_REUSEADDR, and SO_REUSEPORT when `reuseport` (one listener per
// worker, balanced by the kernel). IP_FREEBIND/IPV6_FREEBIND let us bind a service VIP before the
// VIP manager has added it to the node. IPv6 sockets are IPV6_V6ONLY: a v4 service and a v6
// service on the same port are separate listeners. TCP_NODELAY is set on the listener, so every
// accepted socket has it without a setsockopt of its own.
absl::StatusOr<base::UniqueFd> ListenTcp(const SocketAddress& addr, bool reuseport, int backlog);

// A bound UDP socket with the same address options as ListenTcp, plus IP_PKTINFO or
// IPV6_RECVPKTINFO so that recvmsg reports each datagram's destination address (replies must
// leave from the service address a wildcard socket was reached on).
absl::StatusOr<base::UniqueFd> BindUdp(const SocketAddress& addr, bool reuseport);

// Starts a non-blocking connect with TCP_NODELAY set (as Go's net.Dial does: a proxy sends what it
// has at once). EINPROGRESS is success: wait for EPOLLOUT, then check SocketError(). Fails only
// if the connect is refused synchronously (EADDRNOTAVAIL, ENETUNREACH).
absl::StatusOr<base::UniqueFd> DialTcp(const SocketAddress& addr);

// The pending socket error (SO_ERROR), clearing it: 0 if none, else an errno value (also the
// errno of getsockopt itself if that fails). Data-path friendly: no allocation.
int SocketError(int fd);

absl::StatusOr<SocketAddress> LocalAddress(int fd);
absl::StatusOr<SocketAddress> PeerAddress(int fd);

// TCP_NODELAY: a proxy forwards whatever arrives at once; Nagle would delay the peer's small
// writes a second time.
absl::Status SetTcpNoDelay(int fd);

// SO_LINGER {on, 0}: the next close(2) sends RST instead of FIN. Used to propagate a reset.
absl::Status SetLingerZero(int fd);

}  // namespace sluice::net
