// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "lib/event/event_loop.h"

namespace sluice::event {

// An EventLoop running on its own named thread (top(1) and gdb show the name), for a module
// whose sockets must be served off its caller's threads: the data-path workers, the tunnel's
// agent and server, the status servers. Other threads reach it through loop().Post.
// Thread: loop() is thread-safe; Stop and the destructor run on the owner's thread.
class LoopThread final {
 public:
  // `name` is cut to the kernel's 15 characters. `clock` (the loop's) must outlive the thread.
  static absl::StatusOr<std::unique_ptr<LoopThread>> Create(
      const std::string& name, const base::Clock& clock = base::RealClock::Get());
  // Stops and joins the thread (once; later calls do nothing). The loop stays, not running, for
  // an owner that tears down what is registered with it on its own thread.
  void Stop();
  // Stop(), then destroys the loop; tasks still queued are destroyed unrun. Everything watching
  // or timing on the loop must be gone by then, or go with those tasks.
  ~LoopThread();
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  EventLoop& loop() { return *loop_; }

 private:
  explicit LoopThread(std::unique_ptr<EventLoop> loop) : loop_(std::move(loop)) {}

  std::unique_ptr<EventLoop> loop_;
  std::thread thread_;
};

}  // namespace sluice::event
