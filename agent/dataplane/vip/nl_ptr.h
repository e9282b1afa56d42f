// SPDX-License-Identifier: Apache-2.0
// Internal to vip/: owning pointers for libnl objects, and libnl errors as absl::Status.
#pragma once

#include <cstdlib>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"
#include <netlink/addr.h>
#include <netlink/errno.h>
#include <netlink/handlers.h>
#include <netlink/msg.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/route.h>

namespace sluice::vip {

// Calls the libnl release function kRelease (a *_put or *_free) on destruction.
template <auto kRelease>
struct Free {
  template <typename T>
  void operator()(T* object) const {
    kRelease(object);
  }
};

using NlAddrPtr = std::unique_ptr<nl_addr, Free<nl_addr_put>>;
using NlCbPtr = std::unique_ptr<nl_cb, Free<nl_cb_put>>;
using NlMsgPtr = std::unique_ptr<nl_msg, Free<nlmsg_free>>;
using RtnlAddrPtr = std::unique_ptr<rtnl_addr, Free<rtnl_addr_put>>;
using RtnlLinkPtr = std::unique_ptr<rtnl_link, Free<rtnl_link_put>>;
using RtnlRoutePtr = std::unique_ptr<rtnl_route, Free<rtnl_route_put>>;
using NlCachePtr = std::unique_ptr<nl_cache, Free<nl_cache_free>>;

// libnl folds errno into its own NLE_* codes (nl_syserr2nlerr); map those back to absl codes the
// way base::ErrnoStatus maps errno.
inline absl::StatusCode NlErrorCode(int err) {
  switch (std::abs(err)) {
    case NLE_NODEV:
    case NLE_OBJ_NOTFOUND:
    case NLE_NOADDR:  // EADDRNOTAVAIL: deleting an address the link does not have.
      return absl::StatusCode::kNotFound;
    case NLE_PERM:
    case NLE_NOACCESS:
      return absl::StatusCode::kPermissionDenied;
    case NLE_EXIST:
      return absl::StatusCode::kAlreadyExists;
    case NLE_OPNOTSUPP:
    case NLE_AF_NOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    case NLE_INVAL:
    case NLE_RANGE:
      return absl::StatusCode::kInvalidArgument;
    case NLE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case NLE_AGAIN:
    case NLE_INTR:
    case NLE_BUSY:
    case NLE_DUMP_INTR:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kUnknown;
  }
}

// "<op>: <nl_geterror>", e.g. "add link sluice0 type dummy: Operation not supported".
inline absl::Status NlStatus(int err, std::string_view op) {
  return absl::Status(NlErrorCode(err), absl::StrCat(base::Absl(op), ": ", nl_geterror(err)));
}

}  // namespace sluice::vip
