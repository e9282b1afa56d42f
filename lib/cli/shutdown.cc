// SPDX-License-Identifier: Apache-2.0
#include "lib/cli/shutdown.h"

#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>

#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::cli {
namespace {

sigset_t ShutdownSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Polling interval for `drained`: the server's open tunnels, counted under a lock.
constexpr absl::Duration kPollTick = absl::Milliseconds(100);

}  // namespace

const char* SignalName(int signo) { return signo == SIGTERM ? "SIGTERM" : "SIGINT"; }

void BlockShutdownSignals() {
  const sigset_t set = ShutdownSet();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void AwaitShutdown(const Drain& drain, const std::function<bool()>& drained,
                   const base::Clock& clock) {
  const sigset_t set = ShutdownSet();
  int signo = 0;
  while (sigwait(&set, &signo) != 0) {
  }
  const absl::Duration period = drain(signo);
  if (period <= absl::ZeroDuration()) {
    LOG(INFO) << SignalName(signo) << ": stopping";
    return;
  }
  // Monotonic: a wall-clock step must not cut the drain short or stretch it.
  const base::MonoTime until = clock.MonotonicNow() + period;
  while (drained == nullptr || !drained()) {
    const absl::Duration left = until - clock.MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      LOG(INFO) << "drain period over: stopping";
      return;
    }
    const timespec tick = absl::ToTimespec(std::min(left, kPollTick));
    const bool forever = period == absl::InfiniteDuration() && drained == nullptr;
    const int got =
        forever ? (sigwait(&set, &signo) == 0 ? signo : -1) : sigtimedwait(&set, nullptr, &tick);
    if (got > 0) {
      LOG(INFO) << "another signal (" << SignalName(got) << "): stopping now";
      return;
    }
  }
  LOG(INFO) << "drained: stopping";
}

absl::StatusOr<std::unique_ptr<LoopShutdown>> LoopShutdown::Create(
    event::EventLoop& loop, Drain drain, absl::AnyInvocable<void()> stop) {
  const sigset_t set = ShutdownSet();
  base::UniqueFd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd) {
    return base::ErrnoStatus(errno, "signalfd");
  }
  auto s = std::unique_ptr<LoopShutdown>(
      new LoopShutdown(loop, std::move(drain), std::move(stop), std::move(fd)));
  LoopShutdown* raw = s.get();
  ASSIGN_OR_RETURN(s->watch_, loop.Watch(s->fd_.get(), EPOLLIN, [raw](uint32_t) {
    signalfd_siginfo info;
    while (::read(raw->fd_.get(), &info, sizeof(info)) == sizeof(info)) {
      raw->OnSignal(static_cast<int>(info.ssi_signo));
    }
  }));
  return s;
}

LoopShutdown::LoopShutdown(event::EventLoop& loop, Drain drain, absl::AnyInvocable<void()> stop,
                           base::UniqueFd fd)
    : loop_(loop), drain_(std::move(drain)), stop_(std::move(stop)), fd_(std::move(fd)) {}

void LoopShutdown::OnSignal(int signo) {
  if (draining_) {
    LOG(INFO) << "another signal (" << SignalName(signo) << "): stopping now";
    Stop();
    return;
  }
  draining_ = true;
  const absl::Duration period = drain_(signo);
  if (period <= absl::ZeroDuration()) {
    LOG(INFO) << SignalName(signo) << ": stopping";
    Stop();
    return;
  }
  if (period != absl::InfiniteDuration()) {
    timer_ = loop_.CreateTimer([this] {
      LOG(INFO) << "drain period over: stopping";
      Stop();
    });
    timer_->Arm(period);
  }
}

void LoopShutdown::Stop() {
  if (!stopped_) {
    stopped_ = true;
    stop_();
  }
}

}  // namespace sluice::cli
