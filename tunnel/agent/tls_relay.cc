// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/tls_relay.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "tunnel/agent/backend_conn.h"

namespace sluice::tunnel::agent {
namespace {

// A queue bound far above kHighWater: a side pauses its reader at kHighWater, so the other
// side's queue exceeds it by at most one read chunk.
constexpr size_t kMaxQueued = 16 << 20;

// A non-blocking TCP socket whose connect to the first address of `host` has begun.
absl::StatusOr<base::UniqueFd> ConnectTcp(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", host, ": ", gai_strerror(rc)));
  }
  int err = EADDRNOTAVAIL;
  base::UniqueFd fd;
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd.Reset(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
    if (!fd) {
      err = errno;
      continue;
    }
    const int one = 1;
    (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
      break;
    }
    err = errno;
    fd.Reset();
  }
  freeaddrinfo(res);
  if (!fd) {
    return base::ErrnoStatus(err, absl::StrCat("connect to ", host, ":", port));
  }
  return fd;
}

}  // namespace

absl::StatusOr<TlsRelay::Started> TlsRelay::Start(event::EventLoop& loop,
                                                  const wire::TlsContext& tls,
                                                  const std::string& address) {
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(address, &host, &port)) {
    return absl::InvalidArgumentError("proxy server address " + address + ": want host:port");
  }
  ASSIGN_OR_RETURN(base::UniqueFd tcp, ConnectTcp(host, port));
  ASSIGN_OR_RETURN(std::unique_ptr<wire::TlsConn> conn,
                   wire::TlsConn::Connect(tls, tcp.get(), host));
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0) {
    return base::ErrnoStatus(errno, "socketpair");
  }
  base::UniqueFd ours(pair[0]);
  base::UniqueFd theirs(pair[1]);
  auto relay = std::shared_ptr<TlsRelay>(new TlsRelay(loop, address));
  loop.Post(
      [relay, ours = std::move(ours), tcp = std::move(tcp), conn = std::move(conn)]() mutable {
        relay->Begin(std::move(ours), std::move(tcp), std::move(conn));
      });
  return Started{std::move(relay), std::move(theirs)};
}

TlsRelay::~TlsRelay() = default;

void TlsRelay::Begin(base::UniqueFd plain, base::UniqueFd tcp, std::unique_ptr<wire::TlsConn> tls) {
  if (ended_) {
    return;  // closed before it began
  }
  auto p = wire::SocketPump::Create(loop_, std::move(plain), plain_side_, kMaxQueued);
  if (!p.ok()) {
    LOG(WARNING) << "TLS relay to " << address_ << ": " << p.status();
    ended_ = true;
    return;
  }
  auto t = wire::SocketPump::Create(loop_, std::move(tcp), tls_side_, kMaxQueued, std::move(tls));
  if (!t.ok()) {
    LOG(WARNING) << "TLS relay to " << address_ << ": " << t.status();
    ended_ = true;
    return;
  }
  plain_ = std::move(*p);
  tls_ = std::move(*t);
  self_ = shared_from_this();
}

void TlsRelay::Forward(bool from_tls, std::string bytes) {
  wire::SocketPump* to = from_tls ? plain_.get() : tls_.get();
  wire::SocketPump* from = from_tls ? tls_.get() : plain_.get();
  if (ended_ || to == nullptr) {
    return;
  }
  if (!to->Write(std::move(bytes))) {
    End(!from_tls, absl::ResourceExhaustedError("relay queue overflow"));
    return;
  }
  if (to->queued() > kHighWater) {
    from->SetReading(false);  // Drained resumes it
  }
}

void TlsRelay::Drained(bool tls_side) {
  wire::SocketPump* reader = tls_side ? plain_.get() : tls_.get();
  if (!ended_ && reader != nullptr) {
    reader->SetReading(true);
  }
}

void TlsRelay::End(bool tls_side, const absl::Status& reason) {
  if (ended_) {
    return;
  }
  ended_ = true;
  if (!reason.ok() && tls_side) {
    // gRPC sees only the end of its socketpair; the TLS or TCP cause is told here.
    LOG(WARNING) << "TLS connection to proxy server " << address_ << ": " << reason;
  } else if (!reason.ok()) {
    VLOG(1) << "TLS relay to " << address_ << ": gRPC side: " << reason;
  }
  // Not inside the pump's own callback: later on this loop.
  loop_.Post([self = shared_from_this()] { self->Teardown(); });
}

void TlsRelay::Close() {
  loop_.Post([self = shared_from_this()] {
    self->ended_ = true;
    self->Teardown();
  });
}

void TlsRelay::Teardown() {
  plain_.reset();
  tls_.reset();
  self_.reset();  // the caller's closure still holds a reference
}

}  // namespace sluice::tunnel::agent
