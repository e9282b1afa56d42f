// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

#include "tunnel/wire/socket_pump.h"
#include "tunnel/wire/tls.h"

namespace sluice::tunnel::agent {

// One gRPC channel's connection to a proxy server over TLS of our own making, for what gRPC
// 1.51's TLS cannot do: offer the ALPN protocols of upstream proxy-agent's --alpn-proto (a load
// balancer may route by them). gRPC speaks plaintext HTTP/2 into one end of a socketpair; the
// relay moves those bytes through TLS (OpenSSL, TlsContext::CreateClient) to the server and
// back. Each direction pauses its reader while the other side holds more than kHighWater.
// Owns itself on the loop from Start until either side ends (then both close); the owner's
// reference only lets it Close early. Thread: the loop's; Start and Close from any thread.
class TlsRelay final : public std::enable_shared_from_this<TlsRelay> {
 public:
  // Connects (non-blocking) to `address` ("host:port" or "[v6]:port"; the host is resolved
  // here, blocking) and returns the relay and gRPC's end of the socketpair.
  struct Started {
    std::shared_ptr<TlsRelay> relay;
    base::UniqueFd grpc_fd;
  };
  static absl::StatusOr<Started> Start(event::EventLoop& loop, const wire::TlsContext& tls,
                                       const std::string& address);
  ~TlsRelay();

  // Ends both sides (posted to the loop).
  void Close();

  static constexpr size_t kHighWater = 1 << 20;

 private:
  class Side final : public wire::SocketPump::Callbacks {
   public:
    Side(TlsRelay& relay, bool tls_side) : relay_(relay), tls_side_(tls_side) {}
    void OnSocketData(std::string bytes) override { relay_.Forward(tls_side_, std::move(bytes)); }
    void OnSocketDone(absl::Status reason) override { relay_.End(tls_side_, reason); }
    void OnSocketDrained() override { relay_.Drained(tls_side_); }

   private:
    TlsRelay& relay_;
    const bool tls_side_;
  };

  TlsRelay(event::EventLoop& loop, std::string address)
      : loop_(loop), address_(std::move(address)) {}
  void Begin(base::UniqueFd plain, base::UniqueFd tcp, std::unique_ptr<wire::TlsConn> tls);
  void Forward(bool from_tls, std::string bytes);
  void Drained(bool tls_side);
  void End(bool tls_side, const absl::Status& reason);
  void Teardown();

  event::EventLoop& loop_;
  const std::string address_;
  Side plain_side_{*this, false};
  Side tls_side_{*this, true};
  std::unique_ptr<wire::SocketPump> plain_;  // gRPC's socketpair end
  std::unique_ptr<wire::SocketPump> tls_;    // the TCP connection to the server
  std::shared_ptr<TlsRelay> self_;           // held while serving
  bool ended_ = false;
};

}  // namespace sluice::tunnel::agent
