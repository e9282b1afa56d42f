// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"
#include "lib/base/unique_fd.h"

namespace sluice::event {

class EventLoop;

// Base for objects handed to EventLoop::DeferDelete, so an object can end its life from inside its
// own callback without freeing the code that is running.
class DeferredDeletable {
 public:
  virtual ~DeferredDeletable() = default;
};

// One fd registered with the loop's epoll set. Destruction removes it (EPOLL_CTL_DEL), so it must
// be destroyed before the fd is closed; declare the FileEvent after the UniqueFd it watches. An
// owner that closes the fd at once may Detach() first and spare that syscall.
// The events mask is passed to epoll verbatim: add EPOLLET for edge-triggered (the data path does,
// see TcpSession), leave it out for level-triggered (listeners, eventfds). EPOLLERR and EPOLLHUP
// are always reported by the kernel (man 2 epoll_ctl).
// Never destroy a FileEvent inside its own callback; hand its owner to DeferDelete instead.
// Thread: owning loop.
class FileEvent final {
 public:
  FileEvent(const FileEvent&) = delete;
  FileEvent& operator=(const FileEvent&) = delete;
  ~FileEvent();

  // Replaces the interest mask (EPOLL_CTL_MOD). With EPOLLET this also re-arms the edge: the
  // kernel reports the current readiness again. After Cancel it registers the fd again
  // (EPOLL_CTL_ADD), so an owner that leaves epoll while idle keeps its FileEvent.
  absl::Status Modify(uint32_t events);
  // Runs the callback with `events` later in the current loop iteration, without a syscall. An
  // edge-triggered user calls this when it stops early for fairness and must be called back
  // although no new edge will come. Events of repeated calls are merged.
  void Activate(uint32_t events);
  // Unregisters now (EPOLL_CTL_DEL) and drops events queued for it, so its fd may be closed or
  // handed to another FileEvent at once, even from inside this event's own callback; the
  // object itself is freed later by its owner. No-op when already cancelled.
  void Cancel();
  // Like Cancel, but leaves the fd in the epoll set: for an owner that closes the fd right away
  // (close() removes it, unless the file is shared, e.g. dup'ed: its events then reach no
  // handle until that last reference goes) or hands it to a new handle with EventLoop::Adopt.
  // Saves the EPOLL_CTL_DEL, one syscall per connection and side. The handle is not Modify'd
  // again. No-op when cancelled.
  void Detach();
  int fd() const { return fd_; }

 private:
  friend class EventLoop;
  FileEvent(EventLoop& loop, int fd, absl::AnyInvocable<void(uint32_t events)> cb);
  // The epoll_event data: the slot and its generation (see EventLoop::slots_).
  uint64_t Tag() const;
  void Unregister(bool del);

  EventLoop& loop_;
  const int fd_;
  const uint32_t slot_;
  absl::AnyInvocable<void(uint32_t events)> cb_;
  uint32_t activated_events_ = 0;  // non-zero while queued in loop_.activated_
  bool registered_ = true;
};

// A one-shot timer on the loop's monotonic clock, due `after` from the Arm() call. Re-arming an
// armed timer moves its deadline. Timers with equal deadlines fire in the order they were armed. A
// timer may re-arm, disarm or destroy other timers from its callback, and may re-arm itself (it
// then fires in a later iteration, never twice in one). Like a FileEvent, never destroy it inside
// its own callback. Thread: owning loop.
class Timer final {
 public:
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  ~Timer();

  void Arm(absl::Duration after);
  void Disarm();
  bool armed() const { return armed_; }

 private:
  friend class EventLoop;
  using Key = std::pair<base::MonoTime, uint64_t>;  // (deadline, arm sequence)
  Timer(EventLoop& loop, absl::AnyInvocable<void()> cb);

  EventLoop& loop_;
  absl::AnyInvocable<void()> cb_;
  bool armed_ = false;
  std::map<Key, Timer*>::iterator pos_;  // valid while armed_
};

// A single-threaded epoll reactor: file events, timers, cross-thread Post and deferred deletion.
// One per worker thread; everything except Post, Stop and IsInLoopThread must be called on the
// loop thread. FileEvents and Timers must be destroyed before their loop. All its time (timers,
// Now, MonotonicNow) comes from one injected Clock, so a test with a FakeClock turns the loop by
// hand (RunOnce) and moves time without sleeping.
// An iteration: epoll_wait (timeout = next timer, or 0 when work is queued), file callbacks,
// activated file events, due timers, posted tasks, then deferred deletions.
// Thread: owning worker loop (Post/Stop/IsInLoopThread: thread-safe).
class EventLoop final {
 public:
  // `clock` must outlive the loop.
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create(
      const base::Clock& clock = base::RealClock::Get());
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  // Posted tasks that never ran are destroyed unrun, then pending deferred deletions are freed
  // (what they own may still unregister from the loop).
  ~EventLoop();

  // Runs iterations until Stop(). The calling thread becomes the loop thread. A Stop() that
  // happens before Run() makes Run() return after one iteration.
  void Run();
  // One iteration, waiting at most `timeout` for an fd or a posted task (less when a timer is
  // due sooner by the clock). The calling thread becomes the loop thread. For a loop without a
  // thread of its own (tests, fuzzers): returns whether any callback, task or deletion ran.
  bool RunOnce(absl::Duration timeout);
  // Thread-safe. Run() returns at the end of the current iteration.
  void Stop();
  // Thread-safe.
  bool IsInLoopThread() const { return loop_thread_.load() == std::this_thread::get_id(); }
  // Thread-safe. Queues fn to run on the loop thread, in posting order.
  void Post(absl::AnyInvocable<void() &&> fn);

  // Registers fd (not owned). Fails if epoll refuses the fd (EPERM for regular files, EEXIST).
  absl::StatusOr<std::unique_ptr<FileEvent>> Watch(int fd, uint32_t epoll_events,
                                                   absl::AnyInvocable<void(uint32_t events)> cb);
  // Watch for an fd whose earlier handle was Detach()ed: takes its registration over with one
  // EPOLL_CTL_MOD (which also reports the current readiness as a new edge). An fd that is not
  // in the set is added instead.
  absl::StatusOr<std::unique_ptr<FileEvent>> Adopt(int fd, uint32_t epoll_events,
                                                   absl::AnyInvocable<void(uint32_t events)> cb);
  // Returns a disarmed timer.
  std::unique_ptr<Timer> CreateTimer(absl::AnyInvocable<void()> cb);
  // Frees obj at the end of the current iteration (or at the next one when called outside Run).
  void DeferDelete(std::unique_ptr<DeferredDeletable> obj);

  // Wall-clock time cached when the current iteration woke up: for timestamps, not intervals.
  absl::Time Now() const { return now_; }
  // The monotonic clock, cached like Now(): for deadlines, intervals and idle checks.
  base::MonoTime MonotonicNow() const { return mono_now_; }
  size_t armed_timers() const { return timers_.size(); }
  // Thread-safe. A fresh reading, for code that must not use the iteration's cached time.
  const base::Clock& clock() const { return clock_; }

 private:
  friend class FileEvent;
  friend class Timer;
  static constexpr int kMaxEventsPerWait = 256;

  EventLoop(const base::Clock& clock, base::UniqueFd epoll_fd, base::UniqueFd wake_fd);
  // One iteration waiting at most `max_wait_ms` (-1: no limit); true if anything ran.
  bool Iterate(int max_wait_ms);
  void UpdateTime();
  int WaitTimeoutMs();
  bool DispatchFileEvents(int n);
  bool DispatchActivated();
  bool RunDueTimers();
  bool RunPosted();
  bool RunDeferredDeletes();
  void Wake();
  absl::StatusOr<std::unique_ptr<FileEvent>> Register(int fd, uint32_t epoll_events,
                                                      absl::AnyInvocable<void(uint32_t)> cb,
                                                      int first_op);
  // A free slot for a new FileEvent (see slots_).
  uint32_t TakeSlot();
  // Called when a FileEvent stops watching: events already harvested, or still coming for a
  // detached fd, carry the old generation and are dropped, not dispatched to freed memory.
  void Forget(FileEvent* fe);

  const base::Clock& clock_;
  base::UniqueFd epoll_fd_;
  base::UniqueFd wake_fd_;  // eventfd: Post and Stop from other threads
  std::atomic<std::thread::id> loop_thread_;
  std::atomic<bool> stop_requested_{false};

  absl::Time now_;
  base::MonoTime mono_now_;
  std::array<epoll_event, kMaxEventsPerWait> ready_{};
  // FileEvents by slot. epoll reports (generation << 32 | slot); a slot's generation moves on
  // whenever its handle stops watching, so an event for a cancelled, detached or freed handle
  // never matches. Slots are reused through free_slots_.
  struct Slot {
    FileEvent* fe = nullptr;
    uint32_t generation = 0;
  };
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<FileEvent*> activated_;
  std::vector<FileEvent*> activated_running_;
  std::map<Timer::Key, Timer*> timers_;
  uint64_t next_timer_seq_ = 0;
  std::vector<std::unique_ptr<DeferredDeletable>> deferred_;
  int live_handles_ = 0;  // FileEvents and Timers still referring to this loop

  absl::Mutex post_mu_;
  std::vector<absl::AnyInvocable<void() &&>> posted_ ABSL_GUARDED_BY(post_mu_);
};

}  // namespace sluice::event
