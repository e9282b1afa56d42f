// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

#include "tunnel/server/links.h"
#include "tunnel/server/router.h"
#include "tunnel/server/server_metrics.h"
#include "tunnel/wire/byte_budget.h"
#include "tunnel/wire/packet.h"
#include "tunnel/wire/read_gate.h"
#include "tunnel/wire/socket_pump.h"
#include "tunnel/wire/stall_watch.h"
#include "tunnel/wire/tls.h"

namespace sluice::tunnel::server {

// Parsed "CONNECT host:port HTTP/1.1" head. Exposed for tests.
struct ConnectHead {
  int status = 0;  // 0 = ok, else the HTTP error to answer (400, 405)
  std::string authority;
};
ConnectHead ParseConnectHead(const std::string& head);

// The status line and body for a failed dial, as upstream's HTTP CONNECT frontend answers.
std::string ConnectErrorReply(const std::string& dial_error);

struct HttpConnectOptions {
  absl::Duration header_timeout = absl::Seconds(10);
  size_t max_header_bytes = 16 * 1024;
  size_t max_queued = 16 << 20;
  // With an agent without the window extension: how long a client may read nothing while
  // bytes wait for it before it is cut (wire::StallWatch).
  absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout;
  wire::ByteBudget* budget = nullptr;     // server-wide, outlives the frontend
  const wire::TlsContext* tls = nullptr;  // TCP frontends: TLS (mTLS with a client CA)
};

// One HTTP CONNECT client: reads the request head, dials through the Router, then pumps raw
// bytes as DATA packets. Owned by HttpConnectFrontend; gRPC threads reach it only through
// Deliver/Abort, which post to the loop with a weak reference. Thread: the tunnel loop's.
class ConnectSession final : public wire::SocketPump::Callbacks,
                             public Frontend,
                             public std::enable_shared_from_this<ConnectSession> {
 public:
  // What holds the sessions (the frontend). Outlives them; called on the loop thread.
  class Owner {
   public:
    virtual ~Owner() = default;
    // The session has ended; the owner drops it on a later loop turn, never inside this call.
    virtual void OnSessionDone(ConnectSession* session) = 0;
  };

  static absl::StatusOr<std::shared_ptr<ConnectSession>> Create(event::EventLoop& loop,
                                                                base::UniqueFd fd, Owner& owner,
                                                                Router& router,
                                                                ServerMetrics& metrics,
                                                                const HttpConnectOptions& options,
                                                                int64_t random, std::string client);
  ~ConnectSession() override;

  // Loop thread: drop the tunnel and the socket now (server shutdown).
  void Shutdown();

  // Frontend (any thread)
  bool Deliver(wire::Packet packet, const std::shared_ptr<wire::ReadGate>& gate) override;
  void Abort(const std::string& why) override;
  void OnPeerWindow(int64_t peer_window) override;
  void OnCredit(int64_t bytes) override;

  // wire::SocketPump::Callbacks
  void OnSocketData(std::string bytes) override;
  void OnSocketDone(absl::Status reason) override;
  void OnSocketWritten(size_t n) override;
  void OnSocketDrained() override;

 private:
  enum class State { kHead, kDialing, kEstablished, kClosing, kDone };

  ConnectSession(event::EventLoop& loop, Owner& owner, Router& router, ServerMetrics& metrics,
                 const HttpConnectOptions& options, int64_t random, std::string client);
  void OnDeadline();
  void OnHeadBytes(const std::string& bytes);
  void OnDialResponse(const wire::Packet& packet);
  void OnAgentData(std::string bytes, const std::shared_ptr<wire::ReadGate>& gate);
  // Any thread: hold `gate`; the loop then watches for a stall.
  void HoldAgent(const std::shared_ptr<wire::ReadGate>& gate);
  void ReleaseAgent();
  void CheckStall();
  void SendUpstream(std::string bytes);
  // gRPC wrote `n` of our bytes toward the agent.
  void OnSent(size_t n);
  void Reply(const std::string& bytes);
  void End();
  // Charges the budget with what the pump queue grew by (released as it drains).
  void SyncBudget();

  event::EventLoop& loop_;
  Owner& owner_;
  Router& router_;
  ServerMetrics& metrics_;
  const HttpConnectOptions options_;
  const int64_t random_;
  const std::string client_;  // the peer's IP, or "unix": what the pending-dial limit counts
  std::unique_ptr<wire::SocketPump> pump_;
  State state_ = State::kHead;
  std::string head_;
  // Ends the head (408) while the request head is awaited, then the session once it replied.
  std::unique_ptr<event::Timer> deadline_timer_;
  int64_t connect_id_ = 0;
  wire::SendWindow window_;                      // toward the agent stream
  std::unique_ptr<wire::CreditReturn> credits_;  // windowed agents only
  size_t reply_unwritten_ = 0;                   // our own bytes (the 200) ahead of DATA
  std::atomic<size_t> posted_bytes_{0};          // DATA posted to the loop, not yet queued
  size_t pump_charged_ = 0;                      // loop thread: pump bytes charged to the budget
  // On the agent stream while this connection lags (client or loop). Taken on gRPC threads.
  absl::Mutex hold_mu_;
  wire::GateHold hold_ ABSL_GUARDED_BY(hold_mu_);
  // Let go of the stream for a stall (StallWatch kRelease): no hold until the client takes
  // bytes again.
  bool stalled_ ABSL_GUARDED_BY(hold_mu_) = false;
  wire::StallWatch stall_;  // loop thread, from a hold until the client drains
};

}  // namespace sluice::tunnel::server
