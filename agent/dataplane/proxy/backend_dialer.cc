// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/backend_dialer.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>

#include "lib/base/log.h"
#include "lib/net/socket.h"

namespace sluice::proxy {

namespace {

constexpr absl::Duration kFirstTimeout = absl::Milliseconds(250);
constexpr absl::Duration kMaxTimeout = absl::Seconds(2);

absl::Duration Doubling(int n) {
  return std::min(kFirstTimeout * (1 << std::min(n, 4)), kMaxTimeout);
}

DialFailure Classify(int err) {
  switch (err) {
    case ECONNREFUSED:
      return DialFailure::kRefused;
    case ETIMEDOUT:
      return DialFailure::kTimeout;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EADDRNOTAVAIL:
      return DialFailure::kUnreachable;
    default:
      return DialFailure::kOther;
  }
}

}  // namespace

const char* DialFailureName(DialFailure f) {
  switch (f) {
    case DialFailure::kRefused:
      return "refused";
    case DialFailure::kTimeout:
      return "timeout";
    case DialFailure::kUnreachable:
      return "unreachable";
    case DialFailure::kOther:
      return "other";
    case DialFailure::kNoEndpoint:
      return "no_endpoint";
    case DialFailure::kLocalResources:
      return "local_resources";
  }
  return "?";
}

BackendDialer::BackendDialer(event::EventLoop& loop, std::shared_ptr<Balancer> balancer,
                             net::IpAddress client, absl::Duration budget,
                             BackendDialerCallbacks& callbacks)
    : loop_(loop),
      balancer_(std::move(balancer)),
      client_(client),
      deadline_(loop.MonotonicNow() + budget),
      callbacks_(callbacks),
      timer_(loop.CreateTimer([this] {
        if (fd_) {
          Failed(DialFailure::kTimeout);  // the attempt's connect timed out
        } else {
          Attempt();  // the backoff between rounds ended
        }
      })) {}

BackendDialer::~BackendDialer() = default;

void BackendDialer::Start() { Attempt(); }

void BackendDialer::Attempt() {
  auto pick = balancer_->Pick(client_, loop_.MonotonicNow(), failed_);
  if (!pick && !failed_.empty()) {
    // Every endpoint failed this round: back off, then give them all another chance.
    failed_.clear();
    const absl::Duration backoff = Doubling(round_++);
    if (loop_.MonotonicNow() + backoff >= deadline_) {
      GiveUp();
      return;
    }
    timer_->Arm(backoff);
    return;
  }
  if (!pick) {
    callbacks_.OnDialAttemptFailed(DialFailure::kNoEndpoint);
    GiveUp();
    return;
  }
  endpoint_ = *pick;
  auto fd = net::DialTcp(endpoint_);
  if (absl::IsResourceExhausted(fd.status())) {
    // Out of fds (or socket buffers) here, not at the endpoint: retrying for the whole budget
    // would hold the client's fd too, so shed this connection now.
    callbacks_.OnDialAttemptFailed(DialFailure::kLocalResources);
    GiveUp();
    return;
  }
  if (!fd.ok()) {
    Failed(DialFailure::kUnreachable);
    return;
  }
  fd_ = std::move(*fd);
  auto watch = loop_.Watch(fd_.get(), EPOLLOUT, [this](uint32_t) { OnWritable(); });
  if (!watch.ok()) {
    LOG(ERROR) << "dial " << endpoint_.ToString() << ": " << watch.status();
    Failed(DialFailure::kOther);
    return;
  }
  watch_ = std::move(*watch);
  const absl::Duration left = deadline_ - loop_.MonotonicNow();
  timer_->Arm(std::max(absl::ZeroDuration(), std::min(Doubling(attempt_++), left)));
}

void BackendDialer::OnWritable() {
  const int err = net::SocketError(fd_.get());
  if (err != 0) {
    VLOG(2) << "dial " << endpoint_.ToString() << ": " << strerror(err);
    Failed(Classify(err));
    return;
  }
  RetireWatch();  // the session adopts the fd's registration next
  timer_->Disarm();
  done_ = true;
  callbacks_.OnDialed(*this, std::move(fd_));
}

void BackendDialer::Failed(DialFailure reason) {
  VLOG(2) << "dial " << endpoint_.ToString() << " for " << client_.ToString() << ": "
          << DialFailureName(reason);
  RetireWatch();
  fd_.Reset();
  timer_->Disarm();
  callbacks_.OnDialAttemptFailed(reason);
  balancer_->DialFailed(client_);  // a failed dial resets the client's affinity
  failed_.push_back(endpoint_);
  if (loop_.MonotonicNow() >= deadline_) {
    GiveUp();
    return;
  }
  Attempt();
}

void BackendDialer::RetireWatch() {
  if (watch_) {
    // Detach, not Cancel: the fd is closed next (Failed) or adopted by the session (OnWritable),
    // either of which takes it out of epoll or over without an EPOLL_CTL_DEL.
    watch_->Detach();
    retired_.push_back(std::move(watch_));
  }
}

void BackendDialer::GiveUp() {
  timer_->Disarm();
  if (!done_) {
    done_ = true;
    callbacks_.OnDialGaveUp(*this);
  }
}

}  // namespace sluice::proxy
