// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/base/metrics.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"
#include "lib/net/address.h"

#include "tunnel/agent/allow_list.h"
#include "tunnel/agent/resolver.h"
#include "tunnel/wire/packet.h"
#include "tunnel/wire/read_gate.h"
#include "tunnel/wire/socket_pump.h"
#include "tunnel/wire/stall_watch.h"

namespace sluice::tunnel::agent {

struct DialPolicy {
  absl::Duration timeout = absl::Seconds(5);
  const AllowList* allow = nullptr;               // null: every destination (tests)
  base::Family<base::Counter>* denied = nullptr;  // {reason}: dials the allow list refused
  size_t max_queued = 16 << 20;  // bytes toward the backend before the connection is closed
  // A server without the window extension: how long a backend may take nothing before it is
  // closed (wire::StallWatch).
  absl::Duration stall_timeout = wire::StallWatch::kDefaultTimeout;
};

// One tunnelled connection at the agent: an asynchronous dial with a deadline, then a
// SocketPump with per-connection flow control. Thread: the owning loop's (resolver results are
// posted back to it).
class BackendConn final : public wire::SocketPump::Callbacks {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    // Empty error: connected. Otherwise a Go-style dial error text.
    virtual void OnDialDone(BackendConn& conn, const std::string& error) = 0;
    virtual void OnBackendData(BackendConn& conn, std::string bytes) = 0;
    // The backend socket is finished (EOF, error, or the requested close completed).
    virtual void OnBackendDone(BackendConn& conn, absl::Status reason) = 0;
    // The backend took nothing for the stall timeout (a server without the window extension):
    // close it.
    virtual void OnBackendStalled(BackendConn& conn) = 0;
    // Windowed: the backend took `bytes` more of what the server sent; grant them back.
    virtual void OnBackendCredit(BackendConn& conn, int64_t bytes) = 0;
  };

  BackendConn(event::EventLoop& loop, Resolver& resolver, Owner& owner, const DialPolicy& policy,
              int64_t connect_id, int64_t random);
  ~BackendConn() override;
  BackendConn(const BackendConn&) = delete;
  BackendConn& operator=(const BackendConn&) = delete;

  // `self` is a weak handle used to deliver the resolver's answer safely.
  void Dial(const std::string& address, const std::weak_ptr<BackendConn>& self);
  // The server announced a window of `peer_window` per connection and we ours, `own_window`:
  // sending waits for its credit, and what the backend takes is granted back (OnBackendCredit).
  void EnableWindow(int64_t peer_window, int64_t own_window);
  // Bytes from the tunnel. False: the bounded queue overflowed (the caller closes us). Past the
  // high watermark the connection holds `gate` (the server stream's reads; null when windowed)
  // until it drains, for at most ReadGate::kStallGrace without progress (wire::StallWatch).
  bool Write(std::string bytes, const std::shared_ptr<wire::ReadGate>& gate);
  // Flushes queued bytes, then closes; OnBackendDone follows.
  void Close();
  // The owner has let go (the connection is destroyed on a later loop turn): from now on
  // nothing that happens to it is reported.
  void Abandon();
  // Bytes we sent upstream were written by gRPC (flow control credit).
  void Credit(size_t n);
  void Charge(size_t n);
  // The server granted `n` more bytes (SLUICE_CREDIT).
  void Grant(int64_t n);

  int64_t connect_id() const { return connect_id_; }
  int64_t random() const { return random_; }
  bool open() const { return pump_ != nullptr && !pump_->done(); }
  bool connected() const { return pump_ != nullptr; }
  // When Dial was called, on the loop's monotonic clock (dial_duration).
  base::MonoTime started() const { return started_; }

  // wire::SocketPump::Callbacks
  void OnSocketData(std::string bytes) override;
  void OnSocketDone(absl::Status reason) override;
  void OnSocketWritten(size_t n) override;
  void OnSocketDrained() override;

 private:
  void Connect(const net::SocketAddress& dest);
  void OnConnected();
  void FailDial(const std::string& error);
  // Answers as a refused connect(2) would, so a denial looks like upstream's closed port.
  void Deny(const std::string& address, AllowList::Verdict why);
  void CheckStall();

  event::EventLoop& loop_;
  Resolver& resolver_;
  Owner* owner_;  // a silent one once abandoned
  const DialPolicy policy_;
  const int64_t connect_id_;
  const int64_t random_;
  const base::MonoTime started_;
  std::string address_;
  base::UniqueFd connecting_;
  std::unique_ptr<event::FileEvent> connect_watch_;  // on connecting_, until it completes
  std::unique_ptr<event::Timer> dial_timer_;
  std::unique_ptr<wire::SocketPump> pump_;
  wire::SendWindow window_;                      // toward the server stream
  std::unique_ptr<wire::CreditReturn> credits_;  // windowed only
  bool dial_reported_ = false;
  bool closing_ = false;
  wire::GateHold hold_;
  wire::StallWatch stall_;  // from a hold until the backend drains
};

// "host:port" / "[v6]:port" -> host, port. False if malformed.
bool SplitHostPort(const std::string& address, std::string* host, uint16_t* port);

}  // namespace sluice::tunnel::agent
