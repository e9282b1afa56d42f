// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "agent/dataplane/proxy/pipe_pool.h"

namespace sluice::proxy {

// Moves one direction of a TCP connection, src fd -> pipe -> dst fd with splice(2), or through a
// user-space buffer when splice is off or unsupported for this fd pair. The fds are not owned and
// must be non-blocking. The pump keeps edge-triggered readiness: the owner reports readiness
// edges with OnSrcReadable/OnDstWritable and calls Pump(); the pump clears a flag only on EAGAIN,
// so no edge is lost. Between Pump() calls it holds a pipe from the pool only while bytes are in
// it.
// Thread: owning worker loop.
class SplicePump final {
 public:
  enum class Result {
    kWaiting,  // nothing more to do until the next readiness edge
    kYield,    // stopped after the per-call budget with work left: call Pump() again soon
    kEof,      // src reached EOF and every byte was written: shut down dst's write side now.
               // Reported once; Pump() returns kWaiting afterwards.
    kError,    // a syscall failed: see error() and error_at_src()
  };
  enum class Path { kSplice, kCopy };

  // Each Pump() call moves at most this much, so one busy connection cannot starve the others on
  // its worker: four default pipes' worth, roughly Envoy's and HAProxy's per-event read limits.
  static constexpr size_t kBudgetBytes = size_t{256} * 1024;
  // Copy-path buffer, allocated only on fallback.
  static constexpr size_t kCopyBufferBytes = size_t{64} * 1024;

  SplicePump(int src_fd, int dst_fd, PipePool& pool, bool use_splice);
  SplicePump(const SplicePump&) = delete;
  SplicePump& operator=(const SplicePump&) = delete;
  // Returns the pipe to the pool, which closes it if bytes are still in it.
  ~SplicePump();

  void OnSrcReadable() { src_readable_ = true; }
  // src's FIN has arrived (EPOLLRDHUP): every byte still to come is already queued, so the
  // writes that follow carry MSG_MORE and the FIN the owner sends at kEof leaves in the same
  // segment as the last bytes (tcp_send_fin marks an unsent tail) instead of one of its own.
  void OnSrcFin() {
    src_readable_ = true;
    src_fin_ = true;
  }
  // Switches to copy I/O for good (a no-op when already there); pending() must be 0. Bytes the
  // sockmap verdict passed are visible to recv() but not to splice().
  void UseCopy() {
    if (path_ == Path::kSplice) {
      FallBackToCopy("bytes passed by the sockmap verdict");
    }
  }
  // Copy I/O only: while set, reads take no more than what the socket's psock holds (SIOCINQ
  // reports exactly that on a sockmap socket). recv() on such a socket falls back to the TCP
  // receive queue when the psock is empty, and a read there can stop inside an skb that the
  // verdict would later take whole, repeating its head. No EOF is seen while set.
  void SetPsockOnly(bool psock_only) { psock_only_ = psock_only; }
  void OnDstWritable() { dst_writable_ = true; }
  Result Pump();

  Path path() const { return path_; }
  // Whether Pump() reported kEof: the direction has ended.
  bool finished() const { return eof_reported_; }
  // Bytes written to dst.
  uint64_t bytes() const { return bytes_; }
  // Bytes read from src and not yet written to dst.
  size_t pending() const;
  int error() const { return error_; }
  // True while nothing was read from src since a read found it empty (or before the first
  // read): no skb of src is partly consumed. Another reader that takes whole skbs (the sockmap
  // verdict, via tcp_read_skb) may take over src only then, or it would repeat the unread
  // part's already-read head.
  bool src_drained() const { return src_drained_; }
  bool error_at_src() const { return error_at_src_; }

 private:
  enum class Io { kProgress, kWouldBlock, kEof, kError };

  Result Run();
  // Whether this write's tail may wait for the FIN: only once src's FIN is known and EOF will
  // be read (a psock-only read never sees it, and a corked tail would wait for the next ACK).
  bool MoreFollows() const { return src_fin_ && !psock_only_; }

  Io Fill();
  Io Flush();
  Io SpliceIn();
  Io OnSpliceInError(int err, size_t in_pipe);
  Io SpliceOut();
  Io CopyIn();
  Io CopyOut();
  // Switches this connection to copy I/O. Only legal while no byte is in the pipe.
  void FallBackToCopy(const char* why);
  void ReleasePipeIfEmpty();
  Io Fail(int err, bool at_src);

  const int src_fd_;
  const int dst_fd_;
  PipePool& pool_;
  Path path_;
  std::unique_ptr<Pipe> pipe_;      // splice path, only while bytes are in flight
  std::unique_ptr<char[]> buffer_;  // copy path
  size_t buffer_begin_ = 0, buffer_end_ = 0;
  bool src_readable_ = false;
  bool dst_writable_ = false;
  bool src_fin_ = false;
  bool src_eof_ = false;
  bool eof_reported_ = false;
  bool pipe_maybe_full_ = false;  // EAGAIN into a non-empty pipe: flush before reading
  bool spliced_any_ = false;      // a byte went through the pipe: no fallback any more
  bool src_drained_ = true;
  bool psock_only_ = false;
  uint64_t bytes_in_ = 0;  // read from src
  uint64_t bytes_ = 0;     // written to dst
  int error_ = 0;
  bool error_at_src_ = false;
};

}  // namespace sluice::proxy
