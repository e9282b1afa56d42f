// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/socket.h>

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

namespace sluice::event {

// Accepts the connections of one listening socket on a loop, and stops watching the listener for
// a while when accept4 fails for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM): the
// pending connection stays in the backlog, so a level-triggered listener would otherwise be
// reported on every iteration and spin a CPU until some fd is freed. The pause starts at 25 ms
// and doubles up to 1 s while the shortage lasts. Used by every accept loop that has no reserve
// fd to shed with (the proxy workers have one). Thread: owning loop.
class Acceptor final {
 public:
  // Each accepted connection, non-blocking and close-on-exec, with its peer's address.
  using Callback =
      absl::AnyInvocable<void(base::UniqueFd fd, const sockaddr_storage& peer, socklen_t peer_len)>;

  // Watches `listen_fd` (not owned; it must outlive the acceptor). `name` says which listener in
  // the log ("status server 0.0.0.0:10256"). Call on the loop thread or before the loop runs.
  static absl::StatusOr<std::unique_ptr<Acceptor>> Create(EventLoop& loop, int listen_fd,
                                                          std::string name, Callback cb);
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // True while accepting is paused for want of fds or memory.
  bool paused() const { return resume_->armed(); }

 private:
  static constexpr int kBatch = 64;  // accepts per wakeup, so one listener cannot hog the loop
  static constexpr absl::Duration kFirstPause = absl::Milliseconds(25);
  static constexpr absl::Duration kMaxPause = absl::Seconds(1);

  Acceptor(EventLoop& loop, int listen_fd, std::string name, Callback cb);
  void OnReadable();
  void Pause(int err);
  void Resume();

  const int listen_fd_;
  const std::string name_;
  Callback cb_;
  std::unique_ptr<FileEvent> watch_;
  std::unique_ptr<Timer> resume_;
  absl::Duration pause_ = kFirstPause;  // the next pause; back to kFirstPause after an accept
};

}  // namespace sluice::event
