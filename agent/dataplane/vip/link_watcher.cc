// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/link_watcher.h"

#include <errno.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>
#include <sys/socket.h>

#include <array>
#include <string_view>

#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::vip {

absl::StatusOr<std::unique_ptr<LinkWatcher>> LinkWatcher::Create(
    event::EventLoop& loop, const std::string& ignore_interface,
    absl::AnyInvocable<void()> on_change) {
  base::UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
  if (!fd.valid()) {
    return base::ErrnoStatus(errno, "socket(NETLINK_ROUTE)");
  }
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    return base::ErrnoStatus(errno, "bind(NETLINK_ROUTE, link and address groups)");
  }
  auto watcher = std::unique_ptr<LinkWatcher>(
      new LinkWatcher(std::move(fd), ignore_interface, std::move(on_change)));
  // Level-triggered: OnReadable reads until EAGAIN anyway.
  LinkWatcher* self = watcher.get();
  ASSIGN_OR_RETURN(watcher->event_, loop.Watch(watcher->fd_.get(), EPOLLIN,
                                               [self](uint32_t) { self->OnReadable(); }));
  return watcher;
}

LinkWatcher::LinkWatcher(base::UniqueFd fd, std::string ignore_interface,
                         absl::AnyInvocable<void()> on_change)
    : fd_(std::move(fd)),
      ignore_interface_(std::move(ignore_interface)),
      ignore_index_(ignore_interface_.empty()
                        ? 0
                        : static_cast<int>(if_nametoindex(ignore_interface_.c_str()))),
      on_change_(std::move(on_change)) {}

LinkWatcher::~LinkWatcher() = default;

void LinkWatcher::OnReadable() {
  // Large enough for a burst of notifications (each well under 1 KiB) per read.
  alignas(nlmsghdr) std::array<char, 32768> buf;
  bool changed = false;
  for (;;) {
    ssize_t n = recv(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == ENOBUFS) {
      // The kernel dropped notifications (rtnetlink(7)): what changed is unknown.
      changed = true;
      continue;
    }
    if (n < 0) {
      if (errno != EAGAIN) {
        LOG(ERROR) << base::ErrnoStatus(errno, "recv(NETLINK_ROUTE notifications)");
      }
      break;
    }
    if (n == 0) {
      break;
    }
    auto len = static_cast<unsigned int>(n);
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf.data()); NLMSG_OK(h, len);
         h = NLMSG_NEXT(h, len)) {
      changed = Relevant(h, h->nlmsg_len) || changed;
    }
  }
  if (changed) {
    on_change_();
  }
}

bool LinkWatcher::Relevant(const void* message, size_t length) {
  const auto* h = static_cast<const nlmsghdr*>(message);
  switch (h->nlmsg_type) {
    case RTM_NEWADDR:
    case RTM_DELADDR: {
      if (length < NLMSG_LENGTH(sizeof(ifaddrmsg))) {
        return false;
      }
      const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
      return ignore_index_ == 0 || static_cast<int>(ifa->ifa_index) != ignore_index_;
    }
    case RTM_NEWLINK:
    case RTM_DELLINK: {
      if (length < NLMSG_LENGTH(sizeof(ifinfomsg))) {
        return false;
      }
      const auto* ifi = static_cast<const ifinfomsg*>(NLMSG_DATA(h));
      // The ignored interface may come (back) with a new index: follow it by name.
      int attr_len = static_cast<int>(IFLA_PAYLOAD(h));
      for (const auto* rta = IFLA_RTA(ifi); RTA_OK(rta, attr_len); rta = RTA_NEXT(rta, attr_len)) {
        if (rta->rta_type != IFLA_IFNAME) {
          continue;
        }
        const auto* name = static_cast<const char*>(RTA_DATA(rta));
        if (!ignore_interface_.empty() &&
            std::string_view(name, strnlen(name, RTA_PAYLOAD(rta))) == ignore_interface_) {
          ignore_index_ = h->nlmsg_type == RTM_NEWLINK ? ifi->ifi_index : 0;
          return false;
        }
      }
      return ignore_index_ == 0 || ifi->ifi_index != ignore_index_;
    }
    default:
      return false;
  }
}

}  // namespace sluice::vip
