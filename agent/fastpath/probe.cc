// SPDX-License-Identifier: Apache-2.0
#include "agent/fastpath/probe.h"

#include <linux/capability.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

#include "agent/base/capabilities.h"
#include "agent/base/status.h"
#include "agent/fastpath/flow_ring.h"
#include "agent/fastpath/sockmap_link.h"
#include "agent/net/socket.h"

namespace sluice::fastpath {
namespace {

constexpr int kStepTimeoutMs = 2000;

// Waits for `events` on fd; returns the revents or 0 on timeout.
short WaitFd(int fd, short events) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  return poll(&p, 1, kStepTimeoutMs) == 1 ? p.revents : 0;
}

absl::Status Fail(const std::string& what) {
  return absl::InternalError(absl::StrCat("self-test: ", what));
}

absl::Status SendText(int fd, const std::string& text) {
  if (send(fd, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    return base::ErrnoStatus(errno, "self-test: send");
  }
  return absl::OkStatus();
}

// Reads exactly want.size() bytes from the blocking-with-timeout peer fd and compares.
absl::Status ExpectText(int fd, const std::string& want, const char* where) {
  std::string got;
  char buf[64];
  while (got.size() < want.size()) {
    if ((WaitFd(fd, POLLIN) & POLLIN) == 0) {
      return Fail(absl::StrCat("no bytes reached the ", where, " (got \"", got, "\")"));
    }
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) {
      return Fail(absl::StrCat("the ", where, " saw ", n == 0 ? "EOF" : strerror(errno),
                               " instead of \"", want, "\""));
    }
    got.append(buf, static_cast<size_t>(n));
  }
  if (got != want) {
    return Fail(absl::StrCat("the ", where, " got \"", got, "\", want \"", want, "\""));
  }
  return absl::OkStatus();
}

absl::Status ExpectEof(int fd, const char* where) {
  char c;
  if ((WaitFd(fd, POLLIN) & (POLLIN | POLLHUP)) == 0 || recv(fd, &c, 1, MSG_DONTWAIT) != 0) {
    return Fail(absl::StrCat("the ", where, " did not see the forwarded FIN"));
  }
  return absl::OkStatus();
}

struct Pair {
  base::UniqueFd near;  // the proxy's non-blocking end
  base::UniqueFd far;   // the peer
};

// The worker's end-of-direction sequence: on the source's FIN, wait until what it redirected
// reached the destination's send queue, read the source to its EOF, then forward the FIN.
absl::Status ForwardFin(SockmapLink& link, Side src, int src_fd, int dst_fd, uint64_t want,
                        uint64_t user_written) {
  if ((WaitFd(src_fd, POLLRDHUP) & POLLRDHUP) == 0) {
    return Fail("no EPOLLRDHUP on an attached socket");
  }
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kStepTimeoutMs);
  for (;;) {
    ASSIGN_OR_RETURN(Progress p, link.Measure(src, user_written));
    if (p.consumed == want && p.in_flight() == 0) {
      break;
    }
    if (absl::Now() > deadline) {
      return Fail(absl::StrCat("direction did not drain: consumed ", p.consumed, " of ", want,
                               ", written ", p.written));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  char c;
  if (recv(src_fd, &c, 1, MSG_DONTWAIT) != 0) {
    return Fail("bytes or no EOF left on a drained source");
  }
  if (shutdown(dst_fd, SHUT_WR) != 0) {
    return base::ErrnoStatus(errno, "self-test: shutdown");
  }
  return absl::OkStatus();
}

// Flow control: while passing, the client's bytes stay on the accepted socket for recv(); the
// agent forwards them itself, then resumes, and later bytes follow them in order.
absl::Status PassAndResume(SockmapLink& link, Pair& client, Pair& backend, const std::string& text,
                           uint64_t* user_written) {
  RETURN_IF_ERROR(link.Pass(Side::kClient));
  RETURN_IF_ERROR(SendText(client.far.get(), text));
  RETURN_IF_ERROR(ExpectText(client.near.get(), text, "accepted socket (passed bytes)"));
  RETURN_IF_ERROR(SendText(backend.near.get(), text));
  *user_written += text.size();
  ASSIGN_OR_RETURN(Progress p, link.Measure(Side::kClient, *user_written));
  if (p.passed != *user_written) {
    return Fail(absl::StrCat("passed ", p.passed, " bytes, want ", *user_written));
  }
  return link.Resume(Side::kClient, *user_written, 0);
}

absl::StatusOr<Pair> LoopbackPair() {
  ASSIGN_OR_RETURN(base::UniqueFd listener,
                   net::ListenTcp(*net::SocketAddress::Parse("127.0.0.1:0"), false, 1));
  ASSIGN_OR_RETURN(net::SocketAddress addr, net::LocalAddress(listener.get()));
  Pair pair;
  ASSIGN_OR_RETURN(pair.near, net::DialTcp(addr));
  if ((WaitFd(listener.get(), POLLIN) & POLLIN) == 0) {
    return Fail("loopback connect timed out");
  }
  pair.far.Reset(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (!pair.far || (WaitFd(pair.near.get(), POLLOUT) & POLLOUT) == 0) {
    return Fail("loopback connect failed");
  }
  return pair;
}

}  // namespace

absl::Status SelfTest(SockmapFastPath& fast_path) {
  uint64_t user_written = 0;
  ASSIGN_OR_RETURN(Pair client, LoopbackPair());   // far: the client, near: accepted side
  ASSIGN_OR_RETURN(Pair backend, LoopbackPair());  // near: dialled side, far: the backend
  uint64_t signalled = 0;
  ASSIGN_OR_RETURN(auto ring, FlowRing::Create(fast_path, 0, [&](uint64_t cookie, uint64_t) {
                     signalled = cookie;
                   }));
  const std::string early = "sent before insertion", late = "sent after";
  RETURN_IF_ERROR(SendText(client.far.get(), early));
  if ((WaitFd(client.near.get(), POLLIN) & POLLIN) == 0) {  // queued before insertion
    return Fail("loopback bytes did not arrive");
  }
  ASSIGN_OR_RETURN(auto link, SockmapLink::Enrol(fast_path, client.near.get(), backend.near.get(),
                                                 0, /*first_mark=*/1));
  for (Side side : {Side::kClient, Side::kBackend}) {
    if (absl::Status st = link->Attach(side); !st.ok()) {
      return base::Annotate(st, "self-test: attaching an established socket");
    }
  }
  RETURN_IF_ERROR(ExpectText(backend.far.get(), early, "backend (bytes queued before insertion)"));
  if ((WaitFd(ring->fd(), POLLIN) & POLLIN) == 0) {
    return Fail("no flow-control signal on the ring");
  }
  ring->Consume();
  if (signalled != link->cookie(Side::kClient)) {
    return Fail("flow-control signal for the wrong socket");
  }
  RETURN_IF_ERROR(SendText(backend.far.get(), late));
  RETURN_IF_ERROR(ExpectText(client.far.get(), late, "client"));
  const std::string held = "held by the agent";
  RETURN_IF_ERROR(PassAndResume(*link, client, backend, held, &user_written));
  RETURN_IF_ERROR(SendText(client.far.get(), late));
  RETURN_IF_ERROR(ExpectText(backend.far.get(), held + late, "backend (after a pause)"));
  // FIN each way: the empty skb must be dropped, not redirected (it would break the peer).
  shutdown(client.far.get(), SHUT_WR);
  RETURN_IF_ERROR(ForwardFin(*link, Side::kClient, client.near.get(), backend.near.get(),
                             early.size() + late.size(), user_written));
  RETURN_IF_ERROR(ExpectEof(backend.far.get(), "backend"));
  RETURN_IF_ERROR(SendText(backend.far.get(), early));  // the backend may still talk
  RETURN_IF_ERROR(ExpectText(client.far.get(), early, "half-closed client"));
  shutdown(backend.far.get(), SHUT_WR);
  RETURN_IF_ERROR(ForwardFin(*link, Side::kBackend, backend.near.get(), client.near.get(),
                             late.size() + early.size(), 0));
  return ExpectEof(client.far.get(), "client");
}

ProbeResult ProbeSockmap(const SockmapFastPath::Options& options) {
  ProbeResult r;
  r.status = base::RequireCapabilities({{CAP_BPF, "CAP_BPF"}, {CAP_NET_ADMIN, "CAP_NET_ADMIN"}});
  if (!r.status.ok()) {
    r.reason = "permission";
    return r;
  }
  auto fast_path = SockmapFastPath::Create(options);
  if (!fast_path.ok()) {
    r.reason = absl::IsPermissionDenied(fast_path.status()) ? "permission" : "unsupported";
    r.status = base::Annotate(fast_path.status(), "loading the sockmap program");
    return r;
  }
  r.status = SelfTest(**fast_path);
  if (!r.status.ok()) {
    r.reason = "self_test";
    return r;
  }
  r.fast_path = std::move(*fast_path);
  return r;
}

}  // namespace sluice::fastpath
