// SPDX-License-Identifier: Apache-2.0
#include "lib/event/event_loop.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::event {
namespace {

// The eventfd's tag: no slot has this index.
constexpr uint64_t kWakeTag = ~uint64_t{0};

}  // namespace

// ---- FileEvent ----

FileEvent::FileEvent(EventLoop& loop, int fd, absl::AnyInvocable<void(uint32_t events)> cb)
    : loop_(loop), fd_(fd), slot_(loop.TakeSlot()), cb_(std::move(cb)) {
  loop_.slots_[slot_].fe = this;
  ++loop_.live_handles_;
}

FileEvent::~FileEvent() {
  Cancel();  // moves the slot's generation on, unless no event can carry this handle's tag
  loop_.slots_[slot_].fe = nullptr;
  loop_.free_slots_.push_back(slot_);
  --loop_.live_handles_;
}

uint64_t FileEvent::Tag() const { return (uint64_t{loop_.slots_[slot_].generation} << 32) | slot_; }

void FileEvent::Cancel() { Unregister(/*del=*/true); }

void FileEvent::Detach() { Unregister(/*del=*/false); }

void FileEvent::Unregister(bool del) {
  if (!registered_) {
    return;
  }
  registered_ = false;
  if (del && epoll_ctl(loop_.epoll_fd_.get(), EPOLL_CTL_DEL, fd_, nullptr) != 0) {
    // EBADF/ENOENT: the fd was closed first, which already dropped it from the epoll set
    // (unless dup'ed). That is an ordering bug in the owner, but harmless here.
    LOG(WARNING) << "epoll_ctl(DEL fd " << fd_ << "): " << strerror(errno);
  }
  loop_.Forget(this);
}

absl::Status FileEvent::Modify(uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = Tag();
  const int op = registered_ ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (epoll_ctl(loop_.epoll_fd_.get(), op, fd_, &ev) != 0) {
    return base::ErrnoStatus(
        errno, absl::StrCat("epoll_ctl(", registered_ ? "MOD" : "ADD", " fd ", fd_, ")"));
  }
  registered_ = true;
  return absl::OkStatus();
}

void FileEvent::Activate(uint32_t events) {
  if (!registered_) {
    return;  // cancelled: Forget() has run and would not see a new queue entry
  }
  // Bit 31 (EPOLLET) never appears in reported events, so it marks "queued" even for events == 0.
  if (activated_events_ == 0) {
    loop_.activated_.push_back(this);
  }
  activated_events_ |= events | EPOLLET;
}

// ---- Timer ----

Timer::Timer(EventLoop& loop, absl::AnyInvocable<void()> cb) : loop_(loop), cb_(std::move(cb)) {
  ++loop_.live_handles_;
}

Timer::~Timer() {
  Disarm();
  --loop_.live_handles_;
}

void Timer::Arm(absl::Duration after) {
  Disarm();
  // A fresh clock read, not the iteration's cached time: a timer armed outside Run(), or late in
  // a long iteration, must not fire early.
  Key key{loop_.clock_.MonotonicNow() + std::max(after, absl::ZeroDuration()),
          loop_.next_timer_seq_++};
  pos_ = loop_.timers_.emplace(key, this).first;
  armed_ = true;
}

void Timer::Disarm() {
  if (armed_) {
    loop_.timers_.erase(pos_);
    armed_ = false;
  }
}

// ---- EventLoop ----

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create(const base::Clock& clock) {
  base::UniqueFd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd) {
    return base::ErrnoStatus(errno, "epoll_create1");
  }
  base::UniqueFd wake_fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd) {
    return base::ErrnoStatus(errno, "eventfd");
  }
  std::unique_ptr<EventLoop> loop(new EventLoop(clock, std::move(epoll_fd), std::move(wake_fd)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (epoll_ctl(loop->epoll_fd_.get(), EPOLL_CTL_ADD, loop->wake_fd_.get(), &ev) != 0) {
    return base::ErrnoStatus(errno, "epoll_ctl(ADD eventfd)");
  }
  return loop;
}

EventLoop::EventLoop(const base::Clock& clock, base::UniqueFd epoll_fd, base::UniqueFd wake_fd)
    : clock_(clock),
      epoll_fd_(std::move(epoll_fd)),
      wake_fd_(std::move(wake_fd)),
      loop_thread_(std::this_thread::get_id()) {
  UpdateTime();
}

EventLoop::~EventLoop() {
  // Unrun tasks may own sessions whose FileEvents and Timers unregister as they go, and may
  // defer-delete in turn.
  while (true) {
    std::vector<absl::AnyInvocable<void() &&>> tasks;
    {
      absl::MutexLock lock(&post_mu_);
      tasks.swap(posted_);
    }
    if (tasks.empty() && deferred_.empty()) {
      break;
    }
    tasks.clear();
    RunDeferredDeletes();
  }
  SLUICE_CHECK(live_handles_ == 0) << live_handles_ << " FileEvents/Timers outlive their loop";
}

void EventLoop::Run() {
  loop_thread_.store(std::this_thread::get_id());
  do {
    Iterate(-1);
  } while (!stop_requested_.load());
  stop_requested_.store(false);
}

void EventLoop::Stop() {
  stop_requested_.store(true);
  Wake();
}

void EventLoop::Post(absl::AnyInvocable<void() &&> fn) {
  bool was_empty;
  {
    absl::MutexLock lock(&post_mu_);
    was_empty = posted_.empty();
    posted_.push_back(std::move(fn));
  }
  // A non-empty queue already has a wake-up pending or is about to be drained by the loop.
  if (was_empty) {
    Wake();
  }
}

absl::StatusOr<std::unique_ptr<FileEvent>> EventLoop::Watch(
    int fd, uint32_t epoll_events, absl::AnyInvocable<void(uint32_t events)> cb) {
  return Register(fd, epoll_events, std::move(cb), EPOLL_CTL_ADD);
}

absl::StatusOr<std::unique_ptr<FileEvent>> EventLoop::Adopt(
    int fd, uint32_t epoll_events, absl::AnyInvocable<void(uint32_t events)> cb) {
  return Register(fd, epoll_events, std::move(cb), EPOLL_CTL_MOD);
}

absl::StatusOr<std::unique_ptr<FileEvent>> EventLoop::Register(
    int fd, uint32_t epoll_events, absl::AnyInvocable<void(uint32_t)> cb, int first_op) {
  std::unique_ptr<FileEvent> fe(new FileEvent(*this, fd, std::move(cb)));
  epoll_event ev{};
  ev.events = epoll_events;
  ev.data.u64 = fe->Tag();
  int op = first_op;
  int rc = epoll_ctl(epoll_fd_.get(), op, fd, &ev);
  if (rc != 0 && errno == ENOENT && op == EPOLL_CTL_MOD) {
    op = EPOLL_CTL_ADD;
    rc = epoll_ctl(epoll_fd_.get(), op, fd, &ev);
  }
  if (rc != 0) {
    fe->registered_ = false;  // so its destructor skips EPOLL_CTL_DEL
    return base::ErrnoStatus(
        errno, absl::StrCat("epoll_ctl(", op == EPOLL_CTL_ADD ? "ADD" : "MOD", " fd ", fd, ")"));
  }
  return fe;
}

std::unique_ptr<Timer> EventLoop::CreateTimer(absl::AnyInvocable<void()> cb) {
  return std::unique_ptr<Timer>(new Timer(*this, std::move(cb)));
}

void EventLoop::DeferDelete(std::unique_ptr<DeferredDeletable> obj) {
  if (obj != nullptr) {
    deferred_.push_back(std::move(obj));
  }
}

bool EventLoop::RunOnce(absl::Duration timeout) {
  loop_thread_.store(std::this_thread::get_id());
  return Iterate(static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, int64_t{INT32_MAX})));
}

bool EventLoop::Iterate(int max_wait_ms) {
  int timeout_ms = WaitTimeoutMs();
  if (max_wait_ms >= 0 && (timeout_ms < 0 || timeout_ms > max_wait_ms)) {
    timeout_ms = max_wait_ms;
  }
  int n = epoll_wait(epoll_fd_.get(), ready_.data(), kMaxEventsPerWait, timeout_ms);
  if (n < 0) {
    // EINTR (a signal, a debugger) is routine; anything else means a broken epoll fd.
    SLUICE_CHECK(errno == EINTR) << "epoll_wait: " << strerror(errno);
    n = 0;
  }
  UpdateTime();
  // Each step runs whatever the others report (no short-circuit).
  bool ran = DispatchFileEvents(n);
  ran |= DispatchActivated();
  ran |= RunDueTimers();
  ran |= RunPosted();
  ran |= RunDeferredDeletes();
  return ran;
}

void EventLoop::UpdateTime() {
  now_ = clock_.Now();
  mono_now_ = clock_.MonotonicNow();
}

int EventLoop::WaitTimeoutMs() {
  bool posted_pending;
  {
    absl::MutexLock lock(&post_mu_);
    posted_pending = !posted_.empty();
  }
  if (posted_pending || !activated_.empty() || !deferred_.empty() || stop_requested_.load()) {
    return 0;
  }
  if (timers_.empty()) {
    return -1;
  }
  absl::Duration wait = timers_.begin()->first.first - clock_.MonotonicNow();
  if (wait <= absl::ZeroDuration()) {
    return 0;
  }
  // Round up: epoll_wait has millisecond resolution, and waking early would spin until due.
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(wait, absl::Milliseconds(1))), INT32_MAX));
}

bool EventLoop::DispatchFileEvents(int n) {
  bool ran = false;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = ready_[i].data.u64;
    if (tag == kWakeTag) {
      uint64_t count;
      // Drains the eventfd; EAGAIN means another wake-up already drained it.
      (void)!read(wake_fd_.get(), &count, sizeof(count));
      continue;
    }
    // Read afresh for every event: a callback may add slots (the vector moves) or end handles.
    const Slot& slot = slots_[static_cast<uint32_t>(tag)];
    if (slot.fe != nullptr && slot.generation == static_cast<uint32_t>(tag >> 32)) {
      slot.fe->cb_(ready_[i].events);
      ran = true;
    }
  }
  return ran;
}

bool EventLoop::DispatchActivated() {
  bool ran = false;
  // Swap first: callbacks that activate again are served in the next iteration (fairness), which
  // WaitTimeoutMs() makes non-blocking.
  activated_running_.swap(activated_);
  for (FileEvent*& fe : activated_running_) {
    if (fe == nullptr) {
      continue;
    }
    uint32_t events = std::exchange(fe->activated_events_, 0) & ~static_cast<uint32_t>(EPOLLET);
    fe->cb_(events);
    ran = true;
  }
  activated_running_.clear();
  return ran;
}

bool EventLoop::RunDueTimers() {
  bool ran = false;
  // Timers armed from a callback get a sequence >= this and wait for the next iteration, so a
  // timer that re-arms itself with a zero delay cannot starve the loop.
  const uint64_t seq_limit = next_timer_seq_;
  while (!timers_.empty()) {
    auto it = timers_.begin();
    if (it->first.first > mono_now_ || it->first.second >= seq_limit) {
      break;
    }
    Timer* timer = it->second;
    timers_.erase(it);
    timer->armed_ = false;
    timer->cb_();
    ran = true;
  }
  return ran;
}

bool EventLoop::RunPosted() {
  std::vector<absl::AnyInvocable<void() &&>> tasks;
  {
    absl::MutexLock lock(&post_mu_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) {
    std::move(task)();
  }
  return !tasks.empty();
}

bool EventLoop::RunDeferredDeletes() {
  const bool ran = !deferred_.empty();
  // Destructors may defer more objects; keep going until none are left.
  while (!deferred_.empty()) {
    std::vector<std::unique_ptr<DeferredDeletable>> batch;
    batch.swap(deferred_);
    batch.clear();
  }
  return ran;
}

void EventLoop::Wake() {
  uint64_t one = 1;
  // EAGAIN only when the counter is near overflow, which means a wake-up is pending anyway.
  (void)!write(wake_fd_.get(), &one, sizeof(one));
}

uint32_t EventLoop::TakeSlot() {
  if (free_slots_.empty()) {
    slots_.push_back({});
    return static_cast<uint32_t>(slots_.size() - 1);
  }
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void EventLoop::Forget(FileEvent* fe) {
  ++slots_[fe->slot_].generation;
  if (fe->activated_events_ != 0) {
    std::replace(activated_.begin(), activated_.end(), fe, static_cast<FileEvent*>(nullptr));
    std::replace(activated_running_.begin(), activated_running_.end(), fe,
                 static_cast<FileEvent*>(nullptr));
    fe->activated_events_ = 0;  // so an Activate after a new Modify queues it again
  }
}

}  // namespace sluice::event
