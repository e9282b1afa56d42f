// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/pipe_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::proxy {

absl::StatusOr<std::unique_ptr<Pipe>> Pipe::Create(int size_bytes) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    return base::ErrnoStatus(errno, "pipe2");
  }
  base::UniqueFd read_end(fds[0]), write_end(fds[1]);
  int capacity = -1;
  if (size_bytes > 0) {
    capacity = fcntl(write_end.get(), F_SETPIPE_SZ, size_bytes);
    // EPERM past fs.pipe-max-size or the per-user soft limit: the default-sized pipe still
    // works, only with fewer bytes per splice.
    if (capacity < 0) {
      VLOG(1) << "fcntl(F_SETPIPE_SZ " << size_bytes << "): " << strerror(errno);
    }
  }
  if (capacity < 0) {
    capacity = fcntl(write_end.get(), F_GETPIPE_SZ);
    if (capacity < 0) {
      return base::ErrnoStatus(errno, "fcntl(F_GETPIPE_SZ)");
    }
  }
  return std::unique_ptr<Pipe>(
      new Pipe(std::move(read_end), std::move(write_end), static_cast<size_t>(capacity)));
}

void Pipe::Removed(size_t n) {
  SLUICE_CHECK(n <= bytes_in_pipe_)
      << "spliced " << n << " out of a pipe holding " << bytes_in_pipe_;
  bytes_in_pipe_ -= n;
}

absl::StatusOr<std::unique_ptr<Pipe>> PipePool::Get() {
  if (!idle_.empty()) {
    std::unique_ptr<Pipe> pipe = std::move(idle_.back());
    idle_.pop_back();
    return pipe;
  }
  const bool fits = open_bytes_ + static_cast<size_t>(options_.pipe_size) <= options_.budget_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<Pipe> pipe, Pipe::Create(fits ? options_.pipe_size : 0));
  ++created_;
  open_bytes_ += pipe->capacity();
  return pipe;
}

void PipePool::Put(std::unique_ptr<Pipe>&& pipe) {
  if (pipe == nullptr) {
    return;
  }
  if (pipe->bytes_in_pipe() != 0) {
    ++closed_non_empty_;
    Close(std::move(pipe));
  } else if (idle_.size() < options_.max_idle) {
    idle_.push_back(std::move(pipe));
  } else {
    Close(std::move(pipe));
  }
}

void PipePool::Close(std::unique_ptr<Pipe> pipe) { open_bytes_ -= pipe->capacity(); }

}  // namespace sluice::proxy
