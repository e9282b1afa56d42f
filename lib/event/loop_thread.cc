// SPDX-License-Identifier: Apache-2.0
#include "lib/event/loop_thread.h"

#include <pthread.h>

#include <future>

#include "lib/base/status.h"

namespace sluice::event {

absl::StatusOr<std::unique_ptr<LoopThread>> LoopThread::Create(const std::string& name,
                                                               const base::Clock& clock) {
  ASSIGN_OR_RETURN(std::unique_ptr<EventLoop> loop, EventLoop::Create(clock));
  std::unique_ptr<LoopThread> t(new LoopThread(std::move(loop)));
  t->thread_ = std::thread([l = t->loop_.get()] { l->Run(); });
  pthread_setname_np(t->thread_.native_handle(), name.substr(0, 15).c_str());
  // Until Run() begins, IsInLoopThread() still names the creating thread: wait, so callers that
  // act directly when on the loop thread (and post otherwise) never mistake this one for it.
  std::promise<void> running;
  t->loop_->Post([&running] { running.set_value(); });
  running.get_future().wait();
  return t;
}

void LoopThread::Stop() {
  if (thread_.joinable()) {
    loop_->Stop();
    thread_.join();
  }
}

LoopThread::~LoopThread() { Stop(); }

}  // namespace sluice::event
