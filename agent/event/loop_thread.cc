// SPDX-License-Identifier: Apache-2.0
#include "agent/event/loop_thread.h"

#include <pthread.h>

#include "agent/base/status.h"

namespace sluice::event {

absl::StatusOr<std::unique_ptr<LoopThread>> LoopThread::Create(const std::string& name) {
  ASSIGN_OR_RETURN(std::unique_ptr<EventLoop> loop, EventLoop::Create());
  std::unique_ptr<LoopThread> t(new LoopThread(std::move(loop)));
  t->thread_ = std::thread([l = t->loop_.get()] { l->Run(); });
  pthread_setname_np(t->thread_.native_handle(), name.substr(0, 15).c_str());
  return t;
}

LoopThread::~LoopThread() {
  loop_->Stop();
  thread_.join();
}

}  // namespace sluice::event
