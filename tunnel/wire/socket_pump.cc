// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/socket_pump.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>

#include "lib/base/status.h"

#include "tunnel/wire/packet.h"

namespace sluice::tunnel::wire {

absl::StatusOr<std::unique_ptr<SocketPump>> SocketPump::Create(event::EventLoop& loop,
                                                               base::UniqueFd fd,
                                                               Callbacks& callbacks,
                                                               size_t max_queued,
                                                               std::unique_ptr<TlsConn> tls) {
  const int raw = fd.get();
  // Tunnelled bytes arrive in chunks smaller than the loopback MSS; with Nagle on, each one
  // waits for the peer's delayed ACK (~40 ms). Go, and so upstream, sets TCP_NODELAY on every
  // TCP connection. Fails harmlessly (EOPNOTSUPP) on Unix sockets.
  int one = 1;
  (void)setsockopt(raw, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto pump =
      std::unique_ptr<SocketPump>(new SocketPump(loop, std::move(fd), callbacks, max_queued));
  pump->tls_ = std::move(tls);
  pump->interest_ = EPOLLIN;
  ASSIGN_OR_RETURN(pump->watch_, loop.Watch(raw, pump->interest_,
                                            [p = pump.get()](uint32_t ev) { p->OnIoReady(ev); }));
  return pump;
}

SocketPump::SocketPump(event::EventLoop& loop, base::UniqueFd fd, Callbacks& callbacks,
                       size_t max_queued)
    : loop_(loop),
      fd_(std::move(fd)),
      callbacks_(callbacks),
      max_queued_(max_queued),
      last_write_(loop.MonotonicNow()) {}

SocketPump::~SocketPump() = default;

bool SocketPump::Write(std::string bytes) {
  if (done_ || closing_) {
    return true;  // the connection is going away; dropping is the documented outcome
  }
  // An empty DATA packet is legal and means nothing. Queued, it would block the queue: send(2)
  // of 0 bytes "makes no progress", so the level-triggered EPOLLOUT would spin the loop.
  if (bytes.empty()) {
    return true;
  }
  if (queued_ + bytes.size() > max_queued_) {
    return false;
  }
  queued_ += bytes.size();
  out_.push_back(std::move(bytes));
  HandleWrite();
  return true;
}

void SocketPump::SetReading(bool on) {
  if (reading_ != on) {
    reading_ = on;
    UpdateInterest();
  }
}

void SocketPump::CloseAfterFlush() {
  if (done_) {
    return;
  }
  closing_ = true;
  reading_ = false;
  if (out_.empty()) {
    Finish(absl::OkStatus());
  } else {
    UpdateInterest();
  }
}

void SocketPump::OnIoReady(uint32_t events) {
  if (done_) {
    return;
  }
  if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
    HandleWrite();
    if (read_wants_write_ && !done_) {
      read_wants_write_ = false;
      HandleRead();
    }
  }
  if (!done_ && (events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
    if (write_wants_read_) {
      write_wants_read_ = false;
      HandleWrite();
    }
    if (!done_ && reading_) {
      HandleRead();
    }
  }
}

ssize_t SocketPump::ReadOnce(char* buf, size_t len) {
  if (tls_ == nullptr) {
    const ssize_t n = read(fd_.get(), buf, len);
    if (n > 0) {
      return n;
    }
    if (n == 0) {
      Finish(absl::OkStatus());
    } else if (errno != EAGAIN && errno != EINTR) {
      Finish(base::ErrnoStatus(errno, "read"));
    } else {
      return 0;
    }
    return -1;
  }
  size_t n = 0;
  switch (tls_->Read(buf, len, &n)) {
    case TlsConn::Io::kProgress:
      return static_cast<ssize_t>(n);
    case TlsConn::Io::kWantRead:
      return 0;
    case TlsConn::Io::kWantWrite:
      read_wants_write_ = true;
      UpdateInterest();
      return 0;
    case TlsConn::Io::kEof:
      Finish(absl::OkStatus());
      return -1;
    case TlsConn::Io::kError:
      Finish(absl::UnavailableError("tls read: " + tls_->LastError()));
      return -1;
  }
  return -1;
}

void SocketPump::HandleRead() {
  // A few chunks per wake-up keeps one busy socket from starving the others on the loop.
  // Decrypted bytes buffered inside TLS raise no epoll event, so those are always drained.
  // Reads land in a per-thread buffer and leave as exact-size strings: a chunk-sized string
  // per read would be zero-filled first, and a few bytes of interactive traffic would pin a
  // whole chunk's capacity while they wait in the stream's queue.
  thread_local std::unique_ptr<char[]> scratch;
  if (!scratch) {
    scratch = std::make_unique_for_overwrite<char[]>(kReadChunk);
  }
  for (int i = 0; reading_ && !done_ && (i < 4 || (tls_ && tls_->HasPending())); ++i) {
    const ssize_t n = ReadOnce(scratch.get(), kReadChunk);
    if (n <= 0) {
      return;
    }
    callbacks_.OnSocketData(std::string(scratch.get(), static_cast<size_t>(n)));
  }
}

ssize_t SocketPump::WriteOnce(const char* buf, size_t len) {
  if (tls_ == nullptr) {
    while (true) {
      const ssize_t n = send(fd_.get(), buf, len, MSG_NOSIGNAL);
      if (n >= 0) {
        return n;
      }
      if (errno == EAGAIN) {
        return 0;
      }
      if (errno != EINTR) {
        Finish(base::ErrnoStatus(errno, "send"));
        return -1;
      }
    }
  }
  size_t n = 0;
  switch (tls_->Write(buf, len, &n)) {
    case TlsConn::Io::kProgress:
      return static_cast<ssize_t>(n);
    case TlsConn::Io::kWantWrite:
      return 0;
    case TlsConn::Io::kWantRead:
      write_wants_read_ = true;
      return 0;
    case TlsConn::Io::kEof:
    case TlsConn::Io::kError:
      Finish(absl::UnavailableError("tls write: " + tls_->LastError()));
      return -1;
  }
  return -1;
}

void SocketPump::HandleWrite() {
  const bool had_bytes = !out_.empty();
  size_t written = 0;
  while (!out_.empty() && !done_) {
    const std::string& front = out_.front();
    const ssize_t n = WriteOnce(front.data() + out_offset_, front.size() - out_offset_);
    if (n <= 0) {
      break;
    }
    out_offset_ += static_cast<size_t>(n);
    queued_ -= static_cast<size_t>(n);
    written += static_cast<size_t>(n);
    last_write_ = loop_.MonotonicNow();
    if (out_offset_ == front.size()) {
      out_.pop_front();
      out_offset_ = 0;
    }
  }
  if (done_) {
    return;
  }
  if (closing_ && out_.empty()) {
    Finish(absl::OkStatus());
    return;
  }
  UpdateInterest();
  if (written > 0) {
    callbacks_.OnSocketWritten(written);
  }
  if (had_bytes && out_.empty() && !done_) {
    callbacks_.OnSocketDrained();
  }
}

void SocketPump::UpdateInterest() {
  if (done_) {
    return;
  }
  const uint32_t want = (reading_ || write_wants_read_ ? EPOLLIN : 0u) |
                        (out_.empty() && !read_wants_write_ ? 0u : EPOLLOUT);
  if (want == interest_) {
    return;
  }
  // With no interest the fd leaves epoll entirely: a level-triggered EPOLLHUP would otherwise
  // be reported on every wait while reading is paused.
  // Cancelled, not destroyed (this may run inside the watch's own callback); Modify registers
  // it again on resume.
  absl::Status st;
  if (want == 0) {
    watch_->Cancel();
  } else {
    st = watch_->Modify(want);
  }
  interest_ = want;
  if (!st.ok()) {
    Finish(st);
  }
}

void SocketPump::Finish(absl::Status reason) {
  done_ = true;
  out_.clear();
  queued_ = 0;
  if (tls_ != nullptr && reason.ok()) {
    tls_->Shutdown();
  }
  shutdown(fd_.get(), SHUT_RDWR);
  watch_->Cancel();  // not reset: Finish may run inside the watch's own callback
  fd_.Reset();
  callbacks_.OnSocketDone(std::move(reason));
}

}  // namespace sluice::tunnel::wire
