// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

#include "tunnel/wire/tls.h"

namespace sluice::tunnel::wire {

// Moves bytes between one non-blocking TCP (or Unix) socket and its tunnel: reads arrive as
// chunks through Callbacks, writes queue up to a bound. Owns the fd, level-triggered on the
// loop. Thread: the owning loop's.
// Exists so the agent's backend sockets and the server's CONNECT clients share one pump.
class SocketPump final {
 public:
  class Callbacks {
   public:
    virtual ~Callbacks() = default;
    virtual void OnSocketData(std::string bytes) = 0;
    // Called once: EOF from the peer (OK), a socket error, or CloseAfterFlush finished. The
    // owner destroys the pump later (never inside this callback).
    virtual void OnSocketDone(absl::Status reason) = 0;
    // `n` queued bytes were written to the socket (per-connection window credit); called
    // before OnSocketDrained when that follows.
    virtual void OnSocketWritten(size_t /*n*/) {}
    // Everything queued was written (after the queue had been non-empty).
    virtual void OnSocketDrained() {}
  };

  // With `tls`, bytes are encrypted on the socket (the handshake runs inside the first I/O).
  static absl::StatusOr<std::unique_ptr<SocketPump>> Create(event::EventLoop& loop,
                                                            base::UniqueFd fd, Callbacks& callbacks,
                                                            size_t max_queued,
                                                            std::unique_ptr<TlsConn> tls = nullptr);
  ~SocketPump();
  SocketPump(const SocketPump&) = delete;
  SocketPump& operator=(const SocketPump&) = delete;

  // Queues bytes for the socket. Returns false (nothing queued) if they would exceed the bound.
  bool Write(std::string bytes);
  // Stops or resumes reading (per-connection flow control).
  void SetReading(bool on);
  // Stops reading, flushes what is queued, then shuts the socket down and reports done.
  void CloseAfterFlush();
  size_t queued() const { return queued_; }
  // When bytes last left the write queue, on the loop's monotonic clock (stall detection).
  base::MonoTime last_write() const { return last_write_; }
  bool done() const { return done_; }

 private:
  SocketPump(event::EventLoop& loop, base::UniqueFd fd, Callbacks& callbacks, size_t max_queued);
  void OnIoReady(uint32_t events);
  void HandleRead();
  void HandleWrite();
  // One read or write through TLS or the plain socket: >0 bytes, 0 = would block, -1 = done.
  ssize_t ReadOnce(char* buf, size_t len);
  ssize_t WriteOnce(const char* buf, size_t len);
  void UpdateInterest();
  void Finish(absl::Status reason);

  event::EventLoop& loop_;
  base::UniqueFd fd_;
  std::unique_ptr<event::FileEvent> watch_;  // after fd_: unregistered before the close
  Callbacks& callbacks_;
  const size_t max_queued_;
  std::deque<std::string> out_;
  size_t out_offset_ = 0;  // into out_.front()
  size_t queued_ = 0;
  bool reading_ = true;
  bool closing_ = false;
  bool done_ = false;
  uint32_t interest_ = 0;
  base::MonoTime last_write_;
  std::unique_ptr<TlsConn> tls_;
  bool read_wants_write_ = false;  // TLS renegotiation/handshake needs the socket writable
  bool write_wants_read_ = false;
};

}  // namespace sluice::tunnel::wire
