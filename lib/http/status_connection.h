// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"
#include "lib/http/request_head.h"
#include "lib/http/status_server.h"

namespace sluice::http {

class StatusConnection;

// What a StatusConnection needs from the server that owns it. Thread: the server's loop.
class StatusConnectionCallbacks {
 public:
  virtual ~StatusConnectionCallbacks() = default;
  // The reply to a GET or HEAD of `head.path` (404 when no route matches).
  virtual StatusServer::Reply OnRequest(const RequestHead& head) = 0;
  // `conn` is done and its fd closed; the owner frees it later (DeferDelete), never in this call.
  virtual void OnClosed(StatusConnection& conn) = 0;
};

// One client of a StatusServer. Reads a request head, answers it, and only then looks at the
// next one (a pipelined request waits in the buffer), so a client that does not read its
// responses holds one response, not many. Every phase has a deadline that counts from its start,
// not from the last byte: waiting for a whole head (from accept, or from the first byte of the
// next request on a kept-alive connection), writing a response, and the lingering close after a
// refusal. A client sending one byte a second is therefore dropped at the deadline, however
// patient. Between requests a kept-alive connection waits ServerLimits::idle_timeout (none by
// default, as Go's net/http server: scrapers that pool connections keep theirs); the per-source
// and total caps bound what idle connections hold. Closes on a refused request, "Connection:
// close", a deadline, or the peer's end.
// Thread: the server's loop.
class StatusConnection final : public event::DeferredDeletable {
 public:
  static absl::StatusOr<std::unique_ptr<StatusConnection>> Create(
      event::EventLoop& loop, base::UniqueFd fd, std::string source, const ServerLimits& limits,
      StatusConnectionCallbacks& callbacks);
  StatusConnection(const StatusConnection&) = delete;
  StatusConnection& operator=(const StatusConnection&) = delete;

  // The peer's IP: connections are capped per source.
  const std::string& source() const { return source_; }
  // Increases with every phase any connection starts: the smallest began longest ago, and is
  // the first evicted.
  uint64_t phase_order() const { return phase_order_; }
  // Closes now (eviction, shutdown); OnClosed follows. No-op once closed.
  void Close();

 private:
  enum class Phase { kIdle, kReading, kWriting, kLingering };

  StatusConnection(event::EventLoop& loop, base::UniqueFd fd, std::string source,
                   const ServerLimits& limits, StatusConnectionCallbacks& callbacks);
  void OnEvent();
  void Read();
  // Answers the first complete head in in_, if any.
  void Process();
  void Respond(int code, const StatusServer::Reply& reply, bool head_only, bool close,
               int minor_version);
  void Refuse(int code, std::string why);
  void Flush();
  void StartPhase(Phase phase, absl::Duration deadline);
  void Drain();

  event::EventLoop& loop_;
  base::UniqueFd fd_;
  const std::string source_;
  const ServerLimits& limits_;
  StatusConnectionCallbacks& callbacks_;
  std::unique_ptr<event::FileEvent> event_;  // after fd_: unregisters before the close
  std::unique_ptr<event::Timer> deadline_;
  Phase phase_ = Phase::kReading;
  uint32_t interest_ = 0;     // the epoll mask event_ has now
  bool peer_done_ = false;    // the peer has shut down its side
  bool close_after_ = false;  // the response being written is the last one
  bool closed_ = false;
  size_t drained_ = 0;  // bytes discarded while lingering
  std::string in_;
  std::string out_;
  size_t out_sent_ = 0;
  uint64_t phase_order_ = 0;
};

}  // namespace sluice::http
