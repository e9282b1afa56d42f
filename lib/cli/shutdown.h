// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <signal.h>

#include <functional>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

// The one shutdown sequence of the three binaries: the first SIGTERM or SIGINT starts the
// binary's drain, during which it keeps serving; the end of the drain, or any further signal,
// stops it. What a drain does and how long it lasts is each binary's own.
namespace sluice::cli {

// Blocks SIGTERM and SIGINT in the calling thread and so in every thread it starts later, so
// that only the waiters below see them, and ignores SIGPIPE (a peer gone mid-write is an
// error return, not a death). Call in main before any thread starts.
void BlockShutdownSignals();

// "SIGTERM" or "SIGINT", for log lines.
const char* SignalName(int signo);

// Called with the first signal: starts the drain and returns how long to keep serving. Zero
// stops at once; absl::InfiniteDuration() waits for another signal.
using Drain = std::function<absl::Duration(int signo)>;

// The sequence on the calling thread: returns once the binary should stop. `drained`, when
// given, is polled and ends the drain early once true. The drain period counts on `clock`'s
// monotonic time, the process's one clock.
void AwaitShutdown(const Drain& drain, const std::function<bool()>& drained = nullptr,
                   const base::Clock& clock = base::RealClock::Get());

// The same sequence on an event loop (a signalfd and a timer), for a binary whose main thread
// runs one: `stop` runs once, on the loop thread. Thread: the loop's.
class LoopShutdown final {
 public:
  static absl::StatusOr<std::unique_ptr<LoopShutdown>> Create(event::EventLoop& loop, Drain drain,
                                                              absl::AnyInvocable<void()> stop);

 private:
  LoopShutdown(event::EventLoop& loop, Drain drain, absl::AnyInvocable<void()> stop,
               base::UniqueFd fd);
  void OnSignal(int signo);
  void Stop();

  event::EventLoop& loop_;
  Drain drain_;
  absl::AnyInvocable<void()> stop_;
  base::UniqueFd fd_;
  std::unique_ptr<event::FileEvent> watch_;
  std::unique_ptr<event::Timer> timer_;
  bool draining_ = false;
  bool stopped_ = false;
};

}  // namespace sluice::cli
