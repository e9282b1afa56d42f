// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

namespace sluice::vip {

// Follows the links and addresses of the network namespace it was created in: an rtnetlink
// socket in the link, IPv4 and IPv6 address groups, watched on an event loop, calls back once
// per batch of notifications read (so a burst costs one call). Changes on `ignore_interface`
// (the VIP interface, whose addresses are ours and change with every service) are skipped; an
// overrun of the socket's buffer counts as a change. Owns the socket.
// Thread: the loop's.
class LinkWatcher final {
 public:
  static absl::StatusOr<std::unique_ptr<LinkWatcher>> Create(event::EventLoop& loop,
                                                             const std::string& ignore_interface,
                                                             absl::AnyInvocable<void()> on_change);
  ~LinkWatcher();
  LinkWatcher(const LinkWatcher&) = delete;
  LinkWatcher& operator=(const LinkWatcher&) = delete;

 private:
  LinkWatcher(base::UniqueFd fd, std::string ignore_interface,
              absl::AnyInvocable<void()> on_change);
  void OnReadable();
  // Whether one notification is about something other than the ignored interface.
  bool Relevant(const void* message, size_t length);

  base::UniqueFd fd_;
  std::unique_ptr<event::FileEvent> event_;  // after fd_: removed from epoll before the close
  const std::string ignore_interface_;
  int ignore_index_ = 0;  // 0: no such link (yet)
  absl::AnyInvocable<void()> on_change_;
};

}  // namespace sluice::vip
