// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/io_loop.h"

#include <errno.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

#include "agent/base/log.h"
#include "agent/base/status.h"

namespace sluice::tunnel::wire {

absl::StatusOr<std::unique_ptr<IoLoop>> IoLoop::Create(std::string name) {
  ASSIGN_OR_RETURN(std::unique_ptr<IoLoop> loop, CreateManual());
  loop->thread_ = std::thread([l = loop.get()] { l->Run(); });
  pthread_setname_np(loop->thread_.native_handle(), name.substr(0, 15).c_str());
  return loop;
}

absl::StatusOr<std::unique_ptr<IoLoop>> IoLoop::CreateManual() {
  base::UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!ep) {
    return base::ErrnoStatus(errno, "epoll_create1");
  }
  base::UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) {
    return base::ErrnoStatus(errno, "eventfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake.get();
  if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return base::ErrnoStatus(errno, "epoll_ctl(ADD eventfd)");
  }
  return std::unique_ptr<IoLoop>(new IoLoop(std::move(ep), std::move(wake)));
}

IoLoop::IoLoop(base::UniqueFd epoll, base::UniqueFd wake)
    : epoll_(std::move(epoll)), wake_(std::move(wake)) {}

IoLoop::~IoLoop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) {
    thread_.join();
  }
  // Destroy leftover tasks and timers while every member is still alive: their captures
  // (sessions, connections) unregister from this loop in their destructors.
  while (true) {
    std::vector<Task> tasks;
    {
      absl::MutexLock lock(&mu_);
      tasks.swap(tasks_);
    }
    if (tasks.empty()) {
      break;
    }
  }
  auto timers = std::move(timers_);
  timers.clear();
}

void IoLoop::Post(Task task) {
  bool wake;
  {
    absl::MutexLock lock(&mu_);
    wake = tasks_.empty();
    tasks_.push_back(std::move(task));
  }
  if (wake) {
    uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));  // EAGAIN means a wake is already pending
  }
}

absl::Status IoLoop::Add(int fd, uint32_t events, Handler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return base::ErrnoStatus(errno, "epoll_ctl(ADD)");
  }
  handlers_[fd] = handler;
  return absl::OkStatus();
}

absl::Status IoLoop::Modify(int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
    return base::ErrnoStatus(errno, "epoll_ctl(MOD)");
  }
  return absl::OkStatus();
}

void IoLoop::Remove(int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(fd);
}

uint64_t IoLoop::AddTimer(absl::Time when, Task task) {
  const uint64_t id = next_timer_++;
  timers_.emplace(std::make_pair(when, id), std::move(task));
  timer_index_[id] = when;
  return id;
}

void IoLoop::CancelTimer(uint64_t id) {
  auto it = timer_index_.find(id);
  if (it != timer_index_.end()) {
    timers_.erase({it->second, id});
    timer_index_.erase(it);
  }
}

int IoLoop::NextTimeoutMs() const {
  if (timers_.empty()) {
    return -1;
  }
  const absl::Duration d = timers_.begin()->first.first - absl::Now();
  return d <= absl::ZeroDuration() ? 0 : static_cast<int>(absl::ToInt64Milliseconds(d) + 1);
}

bool IoLoop::RunTasks() {
  std::vector<Task> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (auto& t : tasks) {
    t();
  }
  return !tasks.empty();
}

bool IoLoop::RunTimers() {
  const absl::Time now = absl::Now();
  bool ran = false;
  while (!timers_.empty() && timers_.begin()->first.first <= now) {
    auto node = timers_.extract(timers_.begin());
    timer_index_.erase(node.key().second);
    node.mapped()();
    ran = true;
  }
  return ran;
}

void IoLoop::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) {
        return;
      }
    }
    Turn(NextTimeoutMs());
  }
}

bool IoLoop::RunOnce(absl::Duration timeout) {
  SLUICE_CHECK(!thread_.joinable()) << "RunOnce on a loop that has its own thread";
  int ms = static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(timeout), 0, 1 << 30));
  if (const int next = NextTimeoutMs(); next >= 0 && next < ms) {
    ms = next;
  }
  return Turn(ms);
}

bool IoLoop::Turn(int timeout_ms) {
  epoll_event events[64];
  const int n = epoll_wait(epoll_.get(), events, 64, timeout_ms);
  if (n < 0 && errno != EINTR) {
    LOG(FATAL) << "epoll_wait: " << base::ErrnoStatus(errno, "epoll_wait");
  }
  bool ran = false;
  for (int i = 0; i < n; ++i) {
    const int fd = events[i].data.fd;
    if (fd == wake_.get()) {
      uint64_t v;
      (void)!read(wake_.get(), &v, sizeof(v));
      continue;
    }
    // A handler removed earlier in this batch is skipped (its fd may already be reused
    // by a new handler, which then simply sees a spurious, harmless readiness check).
    auto it = handlers_.find(fd);
    if (it != handlers_.end()) {
      it->second->OnIoReady(events[i].events);
      ran = true;
    }
  }
  ran |= RunTasks();
  ran |= RunTimers();
  return ran;
}

}  // namespace sluice::tunnel::wire
