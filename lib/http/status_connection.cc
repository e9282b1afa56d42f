// SPDX-License-Identifier: Apache-2.0
#include "lib/http/status_connection.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/http/request_head.h"

namespace sluice::http {

namespace {

// What is read per readiness report; a head may not exceed ServerLimits::max_head_bytes anyway.
constexpr size_t kReadChunk = 4096;
// A refused client may still be sending (an oversize head): what is read and dropped, at most,
// before closing, so that our close does not become a reset that destroys the reply in flight
// (RFC 9112 section 9.6). Bounded in bytes here and in time by ServerLimits::linger_timeout.
constexpr size_t kMaxDrain = 64 * 1024;

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 301:
      return "Moved Permanently";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";  // the reason phrase is optional (RFC 9112 section 4)
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatusConnection>> StatusConnection::Create(
    event::EventLoop& loop, base::UniqueFd fd, std::string source, const ServerLimits& limits,
    StatusConnectionCallbacks& callbacks) {
  std::unique_ptr<StatusConnection> c(
      new StatusConnection(loop, std::move(fd), std::move(source), limits, callbacks));
  auto event = loop.Watch(c->fd_.get(), EPOLLIN, [raw = c.get()](uint32_t) { raw->OnEvent(); });
  if (!event.ok()) {
    return event.status();
  }
  c->event_ = std::move(*event);
  c->interest_ = EPOLLIN;
  c->StartPhase(Phase::kReading, limits.request_timeout);
  return c;
}

StatusConnection::StatusConnection(event::EventLoop& loop, base::UniqueFd fd, std::string source,
                                   const ServerLimits& limits, StatusConnectionCallbacks& callbacks)
    : loop_(loop),
      fd_(std::move(fd)),
      source_(std::move(source)),
      limits_(limits),
      callbacks_(callbacks),
      deadline_(loop.CreateTimer([this] { Close(); })) {}

void StatusConnection::Close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  event_->Cancel();
  deadline_->Disarm();
  fd_.Reset();
  callbacks_.OnClosed(*this);  // may hand us to DeferDelete: touch nothing after it
}

void StatusConnection::StartPhase(Phase phase, absl::Duration deadline) {
  phase_ = phase;
  static std::atomic<uint64_t> next_order{0};  // atomic: each server has its own thread
  phase_order_ = next_order.fetch_add(1, std::memory_order_relaxed);
  if (deadline == absl::InfiniteDuration()) {
    deadline_->Disarm();
  } else {
    deadline_->Arm(deadline);
  }
  const uint32_t want = phase == Phase::kWriting ? EPOLLOUT : EPOLLIN;
  if (want != interest_) {
    interest_ = want;
    (void)event_->Modify(want);  // cannot fail for a registered fd
  }
}

void StatusConnection::OnEvent() {
  switch (phase_) {
    case Phase::kIdle:
      // The next request has begun: from here it has request_timeout to arrive whole.
      StartPhase(Phase::kReading, limits_.request_timeout);
      Read();
      return;
    case Phase::kReading:
      Read();
      return;
    case Phase::kWriting:
      Flush();
      return;
    case Phase::kLingering:
      Drain();
      return;
  }
}

void StatusConnection::Read() {
  // Never more than one byte past the head limit, so an endless head costs max_head_bytes.
  const size_t room = limits_.max_head_bytes + 1 - std::min(in_.size(), limits_.max_head_bytes);
  char buf[kReadChunk];
  const ssize_t n = ::recv(fd_.get(), buf, std::min(room, sizeof(buf)), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    if (!in_.empty()) {
      Process();  // a pipelined request, activated by Flush
    }
    return;
  }
  if (n < 0) {
    Close();
    return;
  }
  if (n == 0) {
    peer_done_ = true;
  }
  in_.append(buf, static_cast<size_t>(n));
  Process();
}

void StatusConnection::Process() {
  ParsedHead parsed = ParseRequestHead(in_, limits_.max_head_bytes);
  if (parsed.status < 0) {
    if (peer_done_) {
      Close();  // ended before a whole head: nobody to answer
    }
    return;
  }
  if (parsed.status > 0) {
    Refuse(parsed.status, parsed.status == 431 ? "request head too large" : "malformed request");
    return;
  }
  in_.erase(0, parsed.size);
  const RequestHead& head = parsed.head;
  const bool head_only = head.method == "HEAD";
  if (!head_only && head.method != "GET") {
    Refuse(405, "only GET and HEAD are served");
  } else if (head.has_body) {
    Refuse(400, "a GET carries no body");
  } else if (head.path.empty()) {
    Refuse(400, "the target is not a path");
  } else {
    const StatusServer::Reply reply = callbacks_.OnRequest(head);
    Respond(reply.code, reply, head_only, !head.keep_alive || peer_done_, head.minor_version);
  }
}

void StatusConnection::Refuse(int code, std::string why) {
  StatusServer::Reply reply{code, std::move(why) + "\n"};
  if (code == 405) {
    reply.headers.emplace_back("Allow", "GET, HEAD");
  }
  in_.clear();
  Respond(code, reply, false, true, 1);
}

void StatusConnection::Respond(int code, const StatusServer::Reply& reply, bool head_only,
                               bool close, int minor_version) {
  out_ = absl::StrCat(
      "HTTP/1.1 ", code, " ", Reason(code),
      "\r\nDate: ", absl::FormatTime("%a, %d %b %Y %H:%M:%S GMT", loop_.Now(), absl::UTCTimeZone()),
      "\r\nContent-Type: ", reply.content_type, "\r\nContent-Length: ", reply.body.size(), "\r\n");
  if (close) {
    absl::StrAppend(&out_, "Connection: close\r\n");
  } else if (minor_version == 0) {
    absl::StrAppend(&out_, "Connection: keep-alive\r\n");  // HTTP/1.0 closes unless told
  }
  for (const auto& [name, value] : reply.headers) {
    absl::StrAppend(&out_, name, ": ", value, "\r\n");
  }
  absl::StrAppend(&out_, "\r\n");
  if (!head_only) {
    absl::StrAppend(&out_, reply.body);
  }
  out_sent_ = 0;
  close_after_ = close;
  StartPhase(Phase::kWriting, limits_.write_timeout);
  Flush();
}

void StatusConnection::Flush() {
  while (out_sent_ < out_.size()) {
    const ssize_t n =
        ::send(fd_.get(), out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      return;  // EPOLLOUT is armed: the rest goes when the client reads
    }
    if (n < 0) {
      Close();
      return;
    }
    out_sent_ += static_cast<size_t>(n);
  }
  out_.clear();
  if (close_after_) {
    // Our FIN now; the fd closes once the client has seen the reply and closed too.
    (void)::shutdown(fd_.get(), SHUT_WR);
    StartPhase(Phase::kLingering, limits_.linger_timeout);
    Drain();
    return;
  }
  if (!in_.empty()) {
    StartPhase(Phase::kReading, limits_.request_timeout);
    event_->Activate(EPOLLIN);  // a pipelined request: later in this turn, not by recursion
  } else {
    StartPhase(Phase::kIdle, limits_.idle_timeout);
  }
}

void StatusConnection::Drain() {
  char buf[kReadChunk];
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      return;
    }
    drained_ += n > 0 ? static_cast<size_t>(n) : 0;
    if (n <= 0 || drained_ > kMaxDrain) {
      Close();
      return;
    }
  }
}

}  // namespace sluice::http
