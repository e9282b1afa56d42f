// SPDX-License-Identifier: Apache-2.0
#include "lib/event/acceptor.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>

#include <algorithm>
#include <utility>

#include "lib/base/log.h"

namespace sluice::event {

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Create(EventLoop& loop, int listen_fd,
                                                           std::string name, Callback cb) {
  std::unique_ptr<Acceptor> a(new Acceptor(loop, listen_fd, std::move(name), std::move(cb)));
  auto watch = loop.Watch(listen_fd, EPOLLIN, [raw = a.get()](uint32_t) { raw->OnReadable(); });
  if (!watch.ok()) {
    return watch.status();
  }
  a->watch_ = std::move(*watch);
  return a;
}

Acceptor::Acceptor(EventLoop& loop, int listen_fd, std::string name, Callback cb)
    : listen_fd_(listen_fd),
      name_(std::move(name)),
      cb_(std::move(cb)),
      resume_(loop.CreateTimer([this] { Resume(); })) {}

void Acceptor::OnReadable() {
  for (int i = 0; i < kBatch; ++i) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    base::UniqueFd fd(::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                                SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      const int err = errno;
      if (err == EINTR || err == ECONNABORTED) {
        continue;  // ECONNABORTED: that client gave up while queued; take the next one
      }
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        Pause(err);
      } else if (err != EAGAIN) {
        LOG(WARNING) << "accept on " << name_ << ": " << strerror(err);
      }
      return;
    }
    pause_ = kFirstPause;
    cb_(std::move(fd), peer, len);
  }
}

void Acceptor::Pause(int err) {
  if (pause_ == kFirstPause) {  // once per shortage, not once per pause
    LOG(WARNING) << "accept on " << name_ << ": " << strerror(err)
                 << "; pausing accepts until descriptors or memory are free";
  }
  // Leave the epoll set altogether (as the proxy workers' paused listeners do): nothing about
  // the listener is reported until Resume adds it again.
  watch_->Cancel();
  resume_->Arm(pause_);
  pause_ = std::min(pause_ * 2, kMaxPause);
}

void Acceptor::Resume() {
  // EPOLL_CTL_ADD after Cancel; level-triggered, so a connection still queued is reported now.
  if (absl::Status st = watch_->Modify(EPOLLIN); !st.ok()) {
    LOG(ERROR) << "accept on " << name_ << ": watch again: " << st;  // ENOMEM: try later
    resume_->Arm(pause_);
  }
}

}  // namespace sluice::event
