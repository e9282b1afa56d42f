// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "agent/base/unique_fd.h"

namespace sluice::tunnel::wire {

// A small level-triggered epoll loop on its own thread, owning the tunnel's sockets. gRPC
// threads hand work to it with Post, so bytes reach sockets only from this thread (STYLE 3.2).
// The shared agent/event loop is not a dependency of tunnel/ so that the tunnel builds alone.
// Thread: Post and the destructor are thread-safe; everything else runs on the loop thread.
class IoLoop final {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void OnIoReady(uint32_t events) = 0;
  };
  using Task = absl::AnyInvocable<void()>;

  static absl::StatusOr<std::unique_ptr<IoLoop>> Create(std::string name);
  // A loop without a thread: its owner's thread is the loop thread and turns it with RunOnce,
  // so a fuzzer or test decides exactly when sockets, tasks and timers are served.
  static absl::StatusOr<std::unique_ptr<IoLoop>> CreateManual();
  // Stops and joins the thread; tasks still queued are destroyed unrun.
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  void Post(Task task) ABSL_LOCKS_EXCLUDED(mu_);
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Manual loops only: one turn (ready sockets, then posted tasks, then due timers), waiting
  // at most `timeout` for a socket or task. Returns whether anything ran.
  bool RunOnce(absl::Duration timeout);

  // Loop thread. The handler must outlive its registration; Remove it before destroying it.
  absl::Status Add(int fd, uint32_t events, Handler* handler);
  absl::Status Modify(int fd, uint32_t events);
  void Remove(int fd);
  // Runs `task` at `when` unless cancelled; returns an id for CancelTimer.
  uint64_t AddTimer(absl::Time when, Task task);
  void CancelTimer(uint64_t id);

 private:
  IoLoop(base::UniqueFd epoll, base::UniqueFd wake);
  void Run();
  // One turn waiting at most `timeout_ms` (-1: until something happens); true if anything ran.
  bool Turn(int timeout_ms);
  bool RunTasks();
  bool RunTimers();
  int NextTimeoutMs() const;

  base::UniqueFd epoll_;
  base::UniqueFd wake_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Loop-thread state.
  std::unordered_map<int, Handler*> handlers_;
  std::map<std::pair<absl::Time, uint64_t>, Task> timers_;
  std::unordered_map<uint64_t, absl::Time> timer_index_;
  uint64_t next_timer_ = 1;
};

}  // namespace sluice::tunnel::wire
