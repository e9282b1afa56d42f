// SPDX-License-Identifier: Apache-2.0
#include "tunnel/agent/backend_conn.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/log.h"

#include "tunnel/wire/packet.h"

namespace sluice::tunnel::agent {
namespace {

// Go's net package prints syscall errors in lower case ("connect: connection refused").
std::string GoErrno(int err) {
  std::string s = strerror(err);
  if (!s.empty()) {
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  }
  return s;
}

}  // namespace

bool SplitHostPort(const std::string& address, std::string* host, uint16_t* port) {
  size_t colon;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return false;
    }
    *host = address.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = address.rfind(':');
    if (colon == std::string::npos || address.find(':') != colon) {
      return false;
    }
    *host = address.substr(0, colon);
  }
  uint32_t p = 0;
  if (host->empty() || !absl::SimpleAtoi(address.substr(colon + 1), &p) || p == 0 || p > 65535) {
    return false;
  }
  *port = static_cast<uint16_t>(p);
  return true;
}

BackendConn::BackendConn(event::EventLoop& loop, Resolver& resolver, Owner& owner,
                         const DialPolicy& policy, int64_t connect_id, int64_t random)
    : loop_(loop),
      resolver_(resolver),
      owner_(&owner),
      policy_(policy),
      connect_id_(connect_id),
      random_(random),
      started_(loop.MonotonicNow()),
      dial_timer_(loop.CreateTimer(
          [this] { FailDial(absl::StrCat("dial tcp ", address_, ": i/o timeout")); })),
      stall_(loop, policy.stall_timeout, [this] { CheckStall(); }) {}

BackendConn::~BackendConn() = default;

void BackendConn::Dial(const std::string& address, const std::weak_ptr<BackendConn>& self) {
  address_ = address;
  std::string host;
  uint16_t port = 0;
  if (!SplitHostPort(address, &host, &port)) {
    // Go's net.Dial text: the address did not parse, so the error names no address after
    // "dial tcp" (an HTTP CONNECT to a host without a port ends here, as upstream's does).
    FailDial(absl::StrCat("dial tcp: address ", address, ": missing port in address"));
    return;
  }
  dial_timer_->Arm(policy_.timeout);
  if (auto ip = net::IpAddress::Parse(host)) {
    Connect(net::SocketAddress(*ip, port));
    return;
  }
  // What can be checked before resolving is checked first: a refused dial must not cause a
  // DNS query (its name may carry data out; the resolver may be slow). The address itself is
  // checked in Connect, once resolved.
  if (policy_.allow != nullptr && !policy_.allow->MayAllowPort(port)) {
    Deny(address, AllowList::Verdict::kNotListed);
    return;
  }
  event::EventLoop* loop = &loop_;
  resolver_.Resolve(host, [loop, self, port](absl::StatusOr<net::IpAddress> ip) {
    loop->Post([self, port, ip = std::move(ip)] {
      auto conn = self.lock();
      if (!conn || conn->dial_reported_) {
        return;
      }
      if (!ip.ok()) {
        conn->FailDial(absl::StrCat("dial tcp: ", ip.status().message()));
      } else {
        conn->Connect(net::SocketAddress(*ip, port));
      }
    });
  });
}

void BackendConn::Connect(const net::SocketAddress& dest) {
  if (policy_.allow != nullptr) {
    const AllowList::Verdict v = policy_.allow->Check(dest, &IsLocalAddress);
    if (v != AllowList::Verdict::kAllowed) {
      Deny(dest.ToString(), v);
      return;
    }
  }
  sockaddr_storage ss;
  const socklen_t len = dest.ToSockaddr(&ss);
  base::UniqueFd fd(socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    FailDial(absl::StrCat("dial tcp ", dest.ToString(), ": socket: ", GoErrno(errno)));
    return;
  }
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS) {
    FailDial(absl::StrCat("dial tcp ", dest.ToString(), ": connect: ", GoErrno(errno)));
    return;
  }
  auto watch = loop_.Watch(fd.get(), EPOLLOUT, [this](uint32_t) { OnConnected(); });
  if (!watch.ok()) {
    FailDial(absl::StrCat("dial tcp ", dest.ToString(), ": ", watch.status().message()));
    return;
  }
  address_ = dest.ToString();
  connecting_ = std::move(fd);
  connect_watch_ = std::move(*watch);
}

void BackendConn::Deny(const std::string& address, AllowList::Verdict why) {
  if (policy_.denied != nullptr) {
    policy_.denied->WithLabels({VerdictLabel(why)}).Inc();
  }
  VLOG(1) << "dial " << address << " refused by --allowed-destinations (" << VerdictLabel(why)
          << ")";
  // Go's net.Dial text for ECONNREFUSED, what upstream proxy-agent answers for a closed port.
  FailDial(absl::StrCat("dial tcp ", address, ": connect: ", GoErrno(ECONNREFUSED)));
}

void BackendConn::OnConnected() {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(connecting_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  connect_watch_->Cancel();  // inside its own callback: freed with us
  base::UniqueFd fd = std::move(connecting_);
  if (err != 0) {
    FailDial(absl::StrCat("dial tcp ", address_, ": connect: ", GoErrno(err)));
    return;
  }
  auto pump = wire::SocketPump::Create(loop_, std::move(fd), *this, policy_.max_queued);
  if (!pump.ok()) {
    FailDial(absl::StrCat("dial tcp ", address_, ": ", pump.status().message()));
    return;
  }
  pump_ = std::move(*pump);
  dial_timer_->Disarm();
  dial_reported_ = true;
  owner_->OnDialDone(*this, "");
}

void BackendConn::FailDial(const std::string& error) {
  if (dial_reported_) {
    return;
  }
  dial_reported_ = true;
  dial_timer_->Disarm();
  if (connecting_) {
    connect_watch_->Cancel();
    connecting_.Reset();
  }
  owner_->OnDialDone(*this, error);
}

void BackendConn::EnableWindow(int64_t peer_window, int64_t own_window) {
  window_.SetPeerWindow(peer_window);
  credits_ = std::make_unique<wire::CreditReturn>(own_window);
}

bool BackendConn::Write(std::string bytes, const std::shared_ptr<wire::ReadGate>& gate) {
  if (pump_ == nullptr) {
    return true;
  }
  if (!pump_->Write(std::move(bytes))) {
    return false;
  }
  if (gate != nullptr && !hold_.held() && pump_->queued() > policy_.max_queued / 4 &&
      stall_.MayHold(pump_->last_write())) {
    hold_.Take(gate);
    stall_.Start();
    CheckStall();
  }
  return true;
}

// From a hold until the backend drains: one that took nothing for kStallGrace lets go of the
// server stream (its bytes keep queueing up to the hard bound); after the stall timeout it is
// closed.
void BackendConn::CheckStall() {
  if (pump_ == nullptr || pump_->queued() == 0) {
    return;
  }
  switch (stall_.Check(pump_->last_write(), hold_.held())) {
    case wire::StallWatch::Verdict::kWait:
      break;
    case wire::StallWatch::Verdict::kRelease:
      VLOG(1) << "connection " << connect_id_ << " to " << address_ << ": backend took nothing for "
              << wire::ReadGate::kStallGrace << "; the server stream moves on without it";
      hold_.Release();
      break;
    case wire::StallWatch::Verdict::kCut:
      // From a timer, never from inside Write: the owner retires us.
      LOG(WARNING) << "connection " << connect_id_ << " to " << address_
                   << ": backend took nothing for " << stall_.timeout() << " with "
                   << pump_->queued() << " bytes queued; closing it (--stall-timeout)";
      owner_->OnBackendStalled(*this);
      break;
  }
}

void BackendConn::OnSocketWritten(size_t n) {
  if (credits_ == nullptr) {
    return;
  }
  if (const int64_t grant = credits_->Consumed(n, pump_->queued() == 0); grant > 0) {
    owner_->OnBackendCredit(*this, grant);
  }
}

void BackendConn::OnSocketDrained() {
  hold_.Release();
  stall_.Stop();
}

void BackendConn::Abandon() {
  // Reports to nobody.
  class Silent final : public Owner {
    void OnDialDone(BackendConn&, const std::string&) override {}
    void OnBackendData(BackendConn&, std::string) override {}
    void OnBackendDone(BackendConn&, absl::Status) override {}
    void OnBackendStalled(BackendConn&) override {}
    void OnBackendCredit(BackendConn&, int64_t) override {}
  };
  static Silent silent;
  owner_ = &silent;
}

void BackendConn::Close() {
  closing_ = true;
  if (pump_ != nullptr) {
    pump_->CloseAfterFlush();
  }
}

void BackendConn::Charge(size_t n) {
  if (window_.Charge(n) && pump_ != nullptr) {
    pump_->SetReading(false);
  }
}

void BackendConn::Credit(size_t n) {
  if (window_.Credit(n) && !closing_ && pump_ != nullptr && !pump_->done()) {
    pump_->SetReading(true);
  }
}

void BackendConn::Grant(int64_t n) {
  if (window_.Grant(n) && !closing_ && pump_ != nullptr && !pump_->done()) {
    pump_->SetReading(true);
  }
}

void BackendConn::OnSocketData(std::string bytes) {
  owner_->OnBackendData(*this, std::move(bytes));
}

void BackendConn::OnSocketDone(absl::Status reason) {
  hold_.Release();
  owner_->OnBackendDone(*this, std::move(reason));
}

}  // namespace sluice::tunnel::agent
