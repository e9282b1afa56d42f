// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/splice_pump.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "lib/base/log.h"

namespace sluice::proxy {
namespace {

// SPLICE_F_MOVE is only a hint (ignored since Linux 2.6.21) but costs nothing; SPLICE_F_NONBLOCK
// keeps the pipe side from blocking, O_NONBLOCK on the socket does the same for the socket side.
constexpr unsigned kSpliceFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

// HAProxy's SPLICE_FULL_HINT (16*1448), scaled to the pipe: a pipe has one slot per page of
// capacity and every spliced TCP segment takes at least one slot, so with the common 1448-byte
// payload (1500 MTU minus IP, TCP and timestamp headers) a 16-slot 64 KiB pipe is full at 23 KB.
// Past this we flush before reading again rather than pay for a splice that would only EAGAIN.
size_t FullHint(size_t capacity) { return std::max<size_t>(1, capacity / 4096) * 1448; }

}  // namespace

SplicePump::SplicePump(int src_fd, int dst_fd, PipePool& pool, bool use_splice)
    : src_fd_(src_fd), dst_fd_(dst_fd), pool_(pool), path_(Path::kSplice) {
  if (!use_splice) {
    FallBackToCopy("splice disabled");
  }
}

SplicePump::~SplicePump() { pool_.Put(std::move(pipe_)); }

size_t SplicePump::pending() const {
  if (path_ == Path::kCopy) {
    return buffer_end_ - buffer_begin_;
  }
  return pipe_ == nullptr ? 0 : pipe_->bytes_in_pipe();
}

SplicePump::Result SplicePump::Pump() {
  if (error_ != 0) {
    return Result::kError;
  }
  if (eof_reported_) {
    return Result::kWaiting;
  }
  Result result = Run();
  // Between calls a pump holds a pipe only while bytes are in it, so idle connections hold none.
  ReleasePipeIfEmpty();
  return result;
}

SplicePump::Result SplicePump::Run() {
  const uint64_t start = bytes_in_ + bytes_;
  for (;;) {
    const uint64_t before = bytes_in_ + bytes_;
    // Flush first: bytes already read are the oldest, and an empty pipe can go back to the pool.
    if (pending() > 0 && dst_writable_ && Flush() == Io::kError) {
      return Result::kError;
    }
    if (pending() == 0) {
      // Half-close is forwarded only now that this direction holds no bytes (A13).
      if (src_eof_) {
        eof_reported_ = true;
        return Result::kEof;
      }
    }
    if (src_readable_ && !src_eof_ && Fill() == Io::kError) {
      return Result::kError;
    }
    const uint64_t after = bytes_in_ + bytes_;
    if (after == before && !(src_eof_ && pending() == 0)) {
      return Result::kWaiting;
    }
    if (after - start >= kBudgetBytes) {
      return Result::kYield;
    }
  }
}

SplicePump::Io SplicePump::Fill() { return path_ == Path::kSplice ? SpliceIn() : CopyIn(); }

SplicePump::Io SplicePump::Flush() { return path_ == Path::kSplice ? SpliceOut() : CopyOut(); }

SplicePump::Io SplicePump::SpliceIn() {
  if (pipe_ == nullptr) {
    auto pipe = pool_.Get();
    if (!pipe.ok()) {
      // Out of fds for pipes (EMFILE/ENFILE): this connection still works through a buffer.
      FallBackToCopy(std::string(pipe.status().message()).c_str());
      return CopyIn();
    }
    pipe_ = std::move(*pipe);
  }
  const size_t in_pipe = pipe_->bytes_in_pipe();
  if (pipe_maybe_full_ || in_pipe >= std::min(pipe_->capacity(), FullHint(pipe_->capacity()))) {
    return Io::kWouldBlock;  // flush first; src_readable_ stays set so we come back
  }
  ssize_t n;
  do {
    n = splice(src_fd_, nullptr, pipe_->write_fd(), nullptr, pipe_->capacity() - in_pipe,
               kSpliceFlags);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    pipe_->Added(static_cast<size_t>(n));
    bytes_in_ += static_cast<uint64_t>(n);
    spliced_any_ = true;
    src_drained_ = false;
    return Io::kProgress;
  }
  if (n == 0) {
    src_eof_ = true;
    return Io::kEof;
  }
  return OnSpliceInError(errno, in_pipe);
}

SplicePump::Io SplicePump::OnSpliceInError(int err, size_t in_pipe) {
  switch (err) {
    case EAGAIN:
      // splice cannot say whether the socket is empty or the pipe is full (A12). With bytes in
      // the pipe, assume full: stop reading until a flush makes room. With an empty pipe it
      // must be the socket: drained until the next readable edge.
      if (in_pipe > 0) {
        pipe_maybe_full_ = true;
      } else {
        src_readable_ = false;
        src_drained_ = true;
      }
      return Io::kWouldBlock;
    case EINVAL:
    case ENOSYS:
    case EBADF:
      // The fd pair cannot splice (no splice_read/splice_write). Safe to switch only while no
      // byte has gone through the pipe.
      if (!spliced_any_) {
        FallBackToCopy(strerror(err));
        return CopyIn();
      }
      return Fail(err, /*at_src=*/true);
    default:
      return Fail(err, /*at_src=*/true);
  }
}

SplicePump::Io SplicePump::SpliceOut() {
  for (;;) {
    ssize_t n = splice(pipe_->read_fd(), nullptr, dst_fd_, nullptr, pipe_->bytes_in_pipe(),
                       kSpliceFlags | (MoreFollows() ? SPLICE_F_MORE : 0u));
    if (n > 0) {
      pipe_->Removed(static_cast<size_t>(n));
      bytes_ += static_cast<uint64_t>(n);
      pipe_maybe_full_ = false;
      return Io::kProgress;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      dst_writable_ = false;
      return Io::kWouldBlock;
    }
    // n == 0 cannot happen with bytes in the pipe; treat a broken count as an I/O error.
    // EPIPE here also raises SIGPIPE (splice has no MSG_NOSIGNAL): main() ignores SIGPIPE.
    return Fail(n < 0 ? errno : EIO, /*at_src=*/false);
  }
}

SplicePump::Io SplicePump::CopyIn() {
  if (pending() > 0) {
    return Io::kWouldBlock;  // one buffer: refill only once it is written out
  }
  buffer_begin_ = buffer_end_ = 0;
  size_t want = kCopyBufferBytes;
  if (psock_only_) {
    int queued = 0;
    if (ioctl(src_fd_, SIOCINQ, &queued) != 0) {
      return Fail(errno, /*at_src=*/true);
    }
    if (queued <= 0) {
      src_readable_ = false;  // the next passed skb raises EPOLLIN
      src_drained_ = true;
      return Io::kWouldBlock;
    }
    want = std::min(want, static_cast<size_t>(queued));
  }
  for (;;) {
    ssize_t n = read(src_fd_, buffer_.get(), want);
    if (n > 0) {
      buffer_end_ = static_cast<size_t>(n);
      bytes_in_ += static_cast<uint64_t>(n);
      src_drained_ = false;
      return Io::kProgress;
    }
    if (n == 0) {
      src_eof_ = true;
      return Io::kEof;
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN) {
      src_readable_ = false;
      src_drained_ = true;
      return Io::kWouldBlock;
    }
    return Fail(errno, /*at_src=*/true);
  }
}

SplicePump::Io SplicePump::CopyOut() {
  for (;;) {
    // MSG_NOSIGNAL: EPIPE without SIGPIPE.
    ssize_t n = send(dst_fd_, buffer_.get() + buffer_begin_, pending(),
                     MSG_NOSIGNAL | (MoreFollows() ? MSG_MORE : 0));
    if (n > 0) {
      buffer_begin_ += static_cast<size_t>(n);
      bytes_ += static_cast<uint64_t>(n);
      return Io::kProgress;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      dst_writable_ = false;
      return Io::kWouldBlock;
    }
    return Fail(n < 0 ? errno : EIO, /*at_src=*/false);
  }
}

void SplicePump::FallBackToCopy(const char* why) {
  VLOG(1) << "fd " << src_fd_ << " -> fd " << dst_fd_ << ": copy I/O (" << why << ")";
  path_ = Path::kCopy;
  pool_.Put(std::move(pipe_));  // empty: the caller guarantees no byte was spliced
  pipe_maybe_full_ = false;
  buffer_.reset(new char[kCopyBufferBytes]);
}

void SplicePump::ReleasePipeIfEmpty() {
  if (pipe_ != nullptr && pipe_->bytes_in_pipe() == 0) {
    pool_.Put(std::move(pipe_));
    pipe_maybe_full_ = false;
  }
}

SplicePump::Io SplicePump::Fail(int err, bool at_src) {
  error_ = err;
  error_at_src_ = at_src;
  return Io::kError;
}

}  // namespace sluice::proxy
