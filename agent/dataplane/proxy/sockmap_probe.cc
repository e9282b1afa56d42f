// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/sockmap_probe.h"

#include <linux/capability.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/base/capabilities.h"
#include "lib/base/clock.h"
#include "lib/base/metrics.h"
#include "lib/base/status.h"
#include "lib/event/event_loop.h"
#include "lib/net/socket.h"

#include "agent/dataplane/fastpath/flow_ring.h"
#include "agent/dataplane/proxy/pipe_pool.h"
#include "agent/dataplane/proxy/tcp_session.h"

namespace sluice::proxy {
namespace {

// A healthy kernel needs a few tens of milliseconds; a broken one must not hold up the start.
constexpr absl::Duration kDeadline = absl::Seconds(5);
// Low marks and small backend buffers, so that a few hundred KiB make the kernel's queue
// outgrow the high mark while the backend reads nothing.
constexpr SockmapWatermarks kMarks{.high = 64 << 10, .low = 16 << 10};
constexpr int kBackendBuffer = 64 << 10;
constexpr size_t kEarly = 100;  // client bytes queued before the connection is enrolled
constexpr size_t kChunk = 16 << 10;
constexpr char kReply[] = "sent by the backend after the client's FIN";

absl::Status Fail(const std::string& what) {
  return absl::InternalError(absl::StrCat("self-test: ", what));
}

// The client's byte stream from offset `from`: the backend checks order and completeness.
std::string Pattern(uint64_t from, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    s[i] = static_cast<char>('a' + (from + i) % 23);
  }
  return s;
}

bool WaitFd(int fd, short events) {
  pollfd p{.fd = fd, .events = events, .revents = 0};
  return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kDeadline))) == 1;
}

absl::Status SendAll(int fd, const std::string& data, const char* who) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      return base::ErrnoStatus(errno, absl::StrCat("self-test: ", who, " send"));
    }
    off += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// The peers' time: the loop's clock and the probe's deadline on it.
struct Deadline {
  const base::Clock& clock;
  base::MonoTime at;
  bool Passed() const { return clock.MonotonicNow() > at; }
};

// Waits, in a peer thread, for the worker's side to reach a state only a gauge shows: nothing
// signals it, so it looks every millisecond.
absl::Status Await(absl::AnyInvocable<bool()> done, const Deadline& deadline, const char* what) {
  base::Waiter waiter(deadline.clock);
  while (!done()) {
    if (deadline.Passed()) {
      return Fail(what);
    }
    waiter.SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

struct Pair {
  base::UniqueFd near;  // the proxy's: non-blocking
  base::UniqueFd far;   // a peer thread's: blocking, with timeouts
};

absl::StatusOr<Pair> LoopbackPair(int far_receive_buffer) {
  ASSIGN_OR_RETURN(base::UniqueFd listener,
                   net::ListenTcp(*net::SocketAddress::Parse("127.0.0.1:0"), false, 1));
  // Set on the listener: an accepted socket's window scale is fixed by its SYN.
  if (far_receive_buffer > 0 && setsockopt(listener.get(), SOL_SOCKET, SO_RCVBUF,
                                           &far_receive_buffer, sizeof(far_receive_buffer)) != 0) {
    return base::ErrnoStatus(errno, "self-test: setsockopt(SO_RCVBUF)");
  }
  ASSIGN_OR_RETURN(net::SocketAddress addr, net::LocalAddress(listener.get()));
  Pair pair;
  ASSIGN_OR_RETURN(pair.near, net::DialTcp(addr));
  if (!WaitFd(listener.get(), POLLIN)) {
    return Fail("loopback connect timed out");
  }
  pair.far.Reset(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!pair.far || !WaitFd(pair.near.get(), POLLOUT)) {
    return Fail("loopback connect failed");
  }
  const timeval timeout{.tv_sec = absl::ToInt64Seconds(kDeadline), .tv_usec = 0};
  setsockopt(pair.far.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(pair.far.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return pair;
}

// The client: sends until flow control paused its direction (the backend reads nothing until
// then), waits for the resume, sends once more through the kernel, half-closes, and expects
// the reply and the backend's FIN.
absl::Status RunClient(int fd, const SockmapFlow& flow, const Deadline& deadline, uint64_t& sent) {
  while (flow.pauses.Value() == 0) {
    if (deadline.Passed()) {
      return Fail(absl::StrCat("no flow-control pause after ", sent, " bytes"));
    }
    RETURN_IF_ERROR(SendAll(fd, Pattern(sent, kChunk), "client"));
    sent += kChunk;
  }
  RETURN_IF_ERROR(Await([&] { return flow.paused.Value() == 0; }, deadline, "no resume"));
  RETURN_IF_ERROR(SendAll(fd, Pattern(sent, kChunk), "client"));
  sent += kChunk;
  if (shutdown(fd, SHUT_WR) != 0) {
    return base::ErrnoStatus(errno, "self-test: client shutdown");
  }
  std::string got;
  char buf[64];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    got.append(buf, static_cast<size_t>(n));
  }
  if (n < 0 || got != kReply) {
    return Fail(absl::StrCat("the client got \"", got, "\" and ", n < 0 ? strerror(errno) : "EOF",
                             ", want \"", kReply, "\" and EOF"));
  }
  return absl::OkStatus();
}

// The backend: reads nothing until the pause, then the client's whole stream, in order, up to
// the forwarded FIN; replies and half-closes.
absl::Status RunBackend(int fd, const SockmapFlow& flow, const Deadline& deadline,
                        uint64_t& received) {
  RETURN_IF_ERROR(Await([&] { return flow.pauses.Value() > 0; }, deadline, "no pause"));
  char buf[64 << 10];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    if (std::string_view(buf, n) != Pattern(received, static_cast<size_t>(n))) {
      return Fail(absl::StrCat("the backend's bytes differ from byte ", received, " on"));
    }
    received += static_cast<uint64_t>(n);
  }
  if (n < 0) {
    return base::ErrnoStatus(errno, "self-test: backend recv");
  }
  RETURN_IF_ERROR(SendAll(fd, kReply, "backend"));
  if (shutdown(fd, SHUT_WR) != 0) {
    return base::ErrnoStatus(errno, "self-test: backend shutdown");
  }
  return absl::OkStatus();
}

// Owns the session and keeps what it reported when it closed.
struct Connection final : public TcpSessionCallbacks {
  explicit Connection(event::EventLoop& loop) : loop(loop) {}

  void Abort() {
    if (session != nullptr) {
      session->Abort();
    }
  }

  // TcpSessionCallbacks
  void OnSessionClosed(TcpSession& closed, CloseReason why) override {
    reason = why;
    to_backend = closed.bytes_to_backend();
    to_client = closed.bytes_to_client();
    kernel_to_backend = closed.kernel_bytes_to_backend();
    kernel_to_client = closed.kernel_bytes_to_client();
    loop.DeferDelete(std::move(session));
    loop.Stop();
  }

  event::EventLoop& loop;
  std::unique_ptr<TcpSession> session;
  std::optional<CloseReason> reason;
  uint64_t to_backend = 0, to_client = 0, kernel_to_backend = 0, kernel_to_client = 0;
};

// After the run: what the session counted against what the peers saw.
absl::Status CheckCounts(const Connection& c, uint64_t sent, uint64_t received,
                         const SockmapFlow& flow) {
  if (c.reason != CloseReason::kDone) {
    return Fail(absl::StrCat("the connection ended with ",
                             c.reason ? CloseReasonName(*c.reason) : "nothing"));
  }
  const uint64_t reply = sizeof(kReply) - 1;
  if (received != sent || c.to_backend != sent || c.to_client != reply) {
    return Fail(absl::StrCat("client sent ", sent, ", backend got ", received, ", session counted ",
                             c.to_backend, " and ", c.to_client, " of ", reply));
  }
  // The early bytes and the reply went through the verdict; so did all that was not passed.
  if (c.kernel_to_backend < kEarly || c.kernel_to_client != reply) {
    return Fail(absl::StrCat("the kernel redirected ", c.kernel_to_backend, " and ",
                             c.kernel_to_client, " bytes"));
  }
  if (flow.paused.Value() != 0) {
    return Fail("a direction still counts as paused");
  }
  return absl::OkStatus();
}

// Runs the peers against the session until it closes, then checks what everyone counted.
absl::Status Exchange(event::EventLoop& loop, Connection& conn, int client_fd, int backend_fd,
                      const SockmapFlow& flow) {
  std::unique_ptr<event::Timer> watchdog = loop.CreateTimer([&conn] { conn.Abort(); });
  watchdog->Arm(kDeadline);
  // The loop's clock, as its watchdog's: a wall-clock step must not stretch the probe.
  const Deadline deadline{loop.clock(), loop.clock().MonotonicNow() + kDeadline};
  uint64_t sent = kEarly, received = 0;
  absl::Status client_status, backend_status;
  // A peer that fails resets the connection, which ends the other peer and the loop.
  auto abort = [&] { loop.Post([&conn] { conn.Abort(); }); };
  std::thread client_peer([&] {
    client_status = RunClient(client_fd, flow, deadline, sent);
    if (!client_status.ok()) {
      abort();
    }
  });
  std::thread backend_peer([&] {
    backend_status = RunBackend(backend_fd, flow, deadline, received);
    if (!backend_status.ok()) {
      abort();
    }
  });
  loop.Run();  // until the session closes
  client_peer.join();
  backend_peer.join();
  RETURN_IF_ERROR(client_status);
  RETURN_IF_ERROR(backend_status);
  return CheckCounts(conn, sent, received, flow);
}

}  // namespace

absl::Status SockmapSelfTest(fastpath::SockmapFastPath& fast_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<event::EventLoop> loop, event::EventLoop::Create());
  base::Gauge paused;
  base::Counter pauses;
  SockmapContext context{.fast_path = fast_path,
                         .ring = 0,
                         .flow = {.marks = kMarks, .paused = paused, .pauses = pauses}};
  ASSIGN_OR_RETURN(
      std::unique_ptr<fastpath::FlowRing> ring,
      fastpath::FlowRing::Create(fast_path, context.ring, [&context](uint64_t cookie, uint64_t) {
        context.Dispatch(cookie);
      }));
  ASSIGN_OR_RETURN(std::unique_ptr<event::FileEvent> ring_event,
                   loop->Watch(ring->fd(), EPOLLIN, [&ring](uint32_t) { ring->Consume(); }));
  ASSIGN_OR_RETURN(Pair client, LoopbackPair(0));
  ASSIGN_OR_RETURN(Pair backend, LoopbackPair(kBackendBuffer));
  if (setsockopt(backend.near.get(), SOL_SOCKET, SO_SNDBUF, &kBackendBuffer,
                 sizeof(kBackendBuffer)) != 0) {
    return base::ErrnoStatus(errno, "self-test: setsockopt(SO_SNDBUF)");
  }
  // Queued before enrolment: the kick at attach must run the verdict over them.
  RETURN_IF_ERROR(SendAll(client.far.get(), Pattern(0, kEarly), "client"));
  if (!WaitFd(client.near.get(), POLLIN)) {
    return Fail("loopback bytes did not arrive");
  }
  PipePool pool(PipePool::Options{});
  Connection conn(*loop);
  ASSIGN_OR_RETURN(conn.session,
                   TcpSession::Create(*loop, pool, std::move(client.near), std::move(backend.near),
                                      TcpSession::Options{}, conn, &context,
                                      /*sockmap_at_start=*/true));
  if (auto fallback = conn.session->fallback()) {
    return Fail(
        absl::StrCat("enrolling an established connection: ", fastpath::FallbackName(*fallback)));
  }
  for (bool up : {true, false}) {
    if (std::string state = conn.session->DirectionState(up); state != "attached") {
      return Fail(absl::StrCat("attaching an established socket: the direction is ", state));
    }
  }
  return Exchange(*loop, conn, client.far.get(), backend.far.get(), context.flow);
}

ProbeResult ProbeSockmap(const fastpath::SockmapFastPath::Options& options) {
  ProbeResult r;
  r.status = base::RequireCapabilities({{CAP_BPF, "CAP_BPF"}, {CAP_NET_ADMIN, "CAP_NET_ADMIN"}});
  if (!r.status.ok()) {
    r.reason = "permission";
    return r;
  }
  auto fast_path = fastpath::SockmapFastPath::Create(options);
  if (!fast_path.ok()) {
    r.reason = absl::IsPermissionDenied(fast_path.status()) ? "permission" : "unsupported";
    r.status = base::Annotate(fast_path.status(), "loading the sockmap program");
    return r;
  }
  r.status = SockmapSelfTest(**fast_path);
  if (!r.status.ok()) {
    r.reason = "self_test";
    return r;
  }
  r.fast_path = std::move(*fast_path);
  return r;
}

}  // namespace sluice::proxy
