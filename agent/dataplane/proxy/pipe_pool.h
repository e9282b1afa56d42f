// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"

namespace sluice::proxy {

// A kernel pipe used as the zero-copy buffer between two sockets: owns both ends and counts the
// bytes spliced in but not yet out (the kernel cannot tell us cheaply). Thread: owning worker loop.
class Pipe final {
 public:
  // size_bytes is a request (F_SETPIPE_SZ; 0 keeps the kernel's default); capacity() is what
  // the kernel granted.
  static absl::StatusOr<std::unique_ptr<Pipe>> Create(int size_bytes);

  int read_fd() const { return read_end_.get(); }
  int write_fd() const { return write_end_.get(); }
  size_t capacity() const { return capacity_; }
  size_t bytes_in_pipe() const { return bytes_in_pipe_; }
  void Added(size_t n) { bytes_in_pipe_ += n; }
  void Removed(size_t n);

 private:
  Pipe(base::UniqueFd read_end, base::UniqueFd write_end, size_t capacity)
      : read_end_(std::move(read_end)), write_end_(std::move(write_end)), capacity_(capacity) {}

  base::UniqueFd read_end_;
  base::UniqueFd write_end_;
  size_t capacity_;
  size_t bytes_in_pipe_ = 0;
};

// A bounded free list of empty pipes, one per worker, after HAProxy's pipe pool (get_pipe /
// put_pipe). Pumps take a pipe only while bytes are in flight and give it back as soon as it is
// empty, so 10k idle connections hold no pipes: each pipe pins up to capacity() of kernel memory,
// and an unprivileged process past fs.pipe-user-pages-soft gets 2-slot pipes only (man 7 pipe).
// Thread: owning worker loop.
class PipePool final {
 public:
  struct Options {
    // fs.pipe-max-size's default, 256 slots. Every spliced TCP segment takes a slot, so
    // through a veth (1448-byte skbs, no GRO) the kernel's default 16-slot pipe fills at 23 KB
    // and each splice out hands the backend socket only that much; 256 slots move ~370 KB per
    // round. Measured: 1.4x the 4-stream throughput at a third of the proxy CPU per GB
    // (docs/performance.md, issue 12).
    int pipe_size = 1024 * 1024;
    // The kernel charges a pipe's capacity, full or empty, to its user's
    // fs.pipe-user-pages-soft (16384 pages), which every root process on the node shares;
    // past it an unprivileged user's new pipes get 2 slots. So a worker makes pipe_size pipes
    // only while all its pipes total under this, then the kernel's default size.
    size_t budget_bytes = 8 * 1024 * 1024;
    size_t max_idle = 256;  // idle pipes kept per worker; more are closed on Put
  };
  explicit PipePool(const Options& options) : options_(options) {}
  PipePool(const PipePool&) = delete;
  PipePool& operator=(const PipePool&) = delete;

  // An empty pipe: pooled if any, else new. Fails with the pipe2 error (EMFILE, ENFILE).
  absl::StatusOr<std::unique_ptr<Pipe>> Get();
  // Keeps the pipe for reuse if it is empty and the pool has room; otherwise closes it. A pipe
  // still holding bytes belongs to a dead connection, and draining it would cost more than a
  // fresh pipe2.
  void Put(std::unique_ptr<Pipe>&& pipe);

  size_t idle() const { return idle_.size(); }
  uint64_t created() const { return created_; }
  uint64_t closed_non_empty() const { return closed_non_empty_; }
  // Capacity of the pipes this pool made that are still open, idle or lent.
  size_t open_bytes() const { return open_bytes_; }

 private:
  void Close(std::unique_ptr<Pipe> pipe);

  const Options options_;
  std::vector<std::unique_ptr<Pipe>> idle_;
  uint64_t created_ = 0;
  uint64_t closed_non_empty_ = 0;
  size_t open_bytes_ = 0;
};

}  // namespace sluice::proxy
