// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/route_socket.h"

#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <string.h>

#include <string_view>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include "agent/dataplane/vip/nl_ptr.h"

namespace sluice::vip {

namespace {

// A concurrent change to the address list makes the kernel flag the dump (NLM_F_DUMP_INTR);
// it is consistent again on a retry.
constexpr int kDumpAttempts = 3;

std::string AddressText(const net::IpAddress& ip, int prefix_len, int ifindex) {
  return absl::StrCat(ip.ToString(), "/", prefix_len, " (ifindex ", ifindex, ")");
}

// NL_CB_VALID handler for one RTM_NEWADDR message of a dump. libnl 3.7's rtnl_addr parser
// drops IFA_PROTO, so we read the attributes ourselves.
int OnAddressMessage(nl_msg* msg, void* arg) {
  auto* out = static_cast<std::vector<KernelAddress>*>(arg);
  nlmsghdr* hdr = nlmsg_hdr(msg);
  if (hdr->nlmsg_type != RTM_NEWADDR) {
    return NL_SKIP;
  }
  nlattr* tb[IFA_MAX + 1] = {};
  if (nlmsg_parse(hdr, sizeof(ifaddrmsg), tb, IFA_MAX, nullptr) < 0) {
    return NL_SKIP;
  }
  const auto* ifa = static_cast<const ifaddrmsg*>(nlmsg_data(hdr));
  // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links
  // and the only attribute IPv6 sends otherwise (rtnetlink(7)).
  const nlattr* local = tb[IFA_LOCAL] != nullptr ? tb[IFA_LOCAL] : tb[IFA_ADDRESS];
  if (local == nullptr) {
    return NL_SKIP;
  }
  std::optional<net::IpAddress> ip = net::IpAddress::FromBytes(ifa->ifa_family, nla_data(local),
                                                               static_cast<size_t>(nla_len(local)));
  if (!ip) {
    return NL_SKIP;
  }
  KernelAddress address;
  address.ip = *ip;
  address.ifindex = static_cast<int>(ifa->ifa_index);
  address.prefix_len = ifa->ifa_prefixlen;
  if (tb[IFA_LABEL] != nullptr) {
    const auto* text = static_cast<const char*>(nla_data(tb[IFA_LABEL]));
    address.label.assign(text, strnlen(text, static_cast<size_t>(nla_len(tb[IFA_LABEL]))));
  }
  if (tb[IFA_PROTO] != nullptr && nla_len(tb[IFA_PROTO]) >= 1) {
    address.protocol = nla_get_u8(tb[IFA_PROTO]);
  }
  out->push_back(std::move(address));
  return NL_OK;
}

// An rtnl_addr naming ip/prefix_len on ifindex: the key the kernel matches on.
absl::StatusOr<RtnlAddrPtr> MakeAddr(int ifindex, const net::IpAddress& ip, int prefix_len) {
  RtnlAddrPtr addr(rtnl_addr_alloc());
  NlAddrPtr local(nl_addr_build(ip.family(), ip.bytes(), static_cast<size_t>(ip.byte_length())));
  if (addr == nullptr || local == nullptr) {
    return absl::ResourceExhaustedError("allocate libnl address: out of memory");
  }
  nl_addr_set_prefixlen(local.get(), prefix_len);
  rtnl_addr_set_ifindex(addr.get(), ifindex);
  rtnl_addr_set_family(addr.get(), ip.family());
  // rtnl_addr_set_local takes its own reference to `local`.
  if (int err = rtnl_addr_set_local(addr.get(), local.get()); err < 0) {
    return NlStatus(err, absl::StrCat("set local ", AddressText(ip, prefix_len, ifindex)));
  }
  rtnl_addr_set_prefixlen(addr.get(), prefix_len);
  return addr;
}

// A table-local `local` route for range via ifindex: the key the kernel matches on.
absl::StatusOr<RtnlRoutePtr> MakeLocalRoute(int ifindex, const net::Cidr& range, uint8_t protocol) {
  const net::IpAddress& base = range.base();
  RtnlRoutePtr route(rtnl_route_alloc());
  NlAddrPtr dst(
      nl_addr_build(base.family(), base.bytes(), static_cast<size_t>(base.byte_length())));
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  if (route == nullptr || dst == nullptr || nh == nullptr) {
    if (nh != nullptr) {
      rtnl_route_nh_free(nh);
    }
    return absl::ResourceExhaustedError("allocate libnl route: out of memory");
  }
  nl_addr_set_prefixlen(dst.get(), range.prefix());
  rtnl_route_set_family(route.get(), static_cast<uint8_t>(base.family()));
  rtnl_route_set_table(route.get(), RT_TABLE_LOCAL);
  rtnl_route_set_type(route.get(), RTN_LOCAL);
  rtnl_route_set_scope(route.get(), RT_SCOPE_HOST);
  rtnl_route_set_protocol(route.get(), protocol);
  // Both setters take their own reference (the route owns the nexthop from here on).
  if (int err = rtnl_route_set_dst(route.get(), dst.get()); err < 0) {
    rtnl_route_nh_free(nh);
    return NlStatus(err, absl::StrCat("route to ", range.ToString()));
  }
  rtnl_route_nh_set_ifindex(nh, ifindex);
  rtnl_route_add_nexthop(route.get(), nh);
  return route;
}

}  // namespace

void RouteSocket::Free::operator()(nl_sock* sock) const { nl_socket_free(sock); }

RouteSocket::~RouteSocket() = default;

absl::StatusOr<std::unique_ptr<RouteSocket>> RouteSocket::Create() {
  std::unique_ptr<nl_sock, Free> sock(nl_socket_alloc());
  if (sock == nullptr) {
    return absl::ResourceExhaustedError("allocate netlink socket: out of memory");
  }
  // nl_connect opens the socket with SOCK_CLOEXEC.
  if (int err = nl_connect(sock.get(), NETLINK_ROUTE); err < 0) {
    return NlStatus(err, "connect NETLINK_ROUTE socket");
  }
  return std::unique_ptr<RouteSocket>(new RouteSocket(std::move(sock)));
}

absl::StatusOr<int> RouteSocket::LinkIndex(const std::string& name) {
  rtnl_link* raw = nullptr;
  if (int err = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), &raw); err < 0) {
    return NlStatus(err, absl::StrCat("get link ", name));
  }
  RtnlLinkPtr link(raw);
  return rtnl_link_get_ifindex(link.get());
}

absl::Status RouteSocket::AddLink(const std::string& name, const std::string& kind) {
  const std::string op = absl::StrCat("add link ", name, " type ", kind);
  RtnlLinkPtr link(rtnl_link_alloc());
  if (link == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory"));
  }
  rtnl_link_set_name(link.get(), name.c_str());
  if (int err = rtnl_link_set_type(link.get(), kind.c_str()); err < 0) {
    return NlStatus(err, op);
  }
  if (int err = rtnl_link_add(sock_.get(), link.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0) {
    return NlStatus(err, op);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> RouteSocket::SetUp(const std::string& name) {
  const std::string op = absl::StrCat("set link ", name, " up");
  rtnl_link* raw = nullptr;
  if (int err = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), &raw); err < 0) {
    return NlStatus(err, op);
  }
  RtnlLinkPtr current(raw);
  if ((rtnl_link_get_flags(current.get()) & IFF_UP) != 0) {
    return false;
  }
  RtnlLinkPtr change(rtnl_link_alloc());
  if (change == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory"));
  }
  rtnl_link_set_flags(change.get(), IFF_UP);
  if (int err = rtnl_link_change(sock_.get(), current.get(), change.get(), 0); err < 0) {
    return NlStatus(err, op);
  }
  return true;
}

absl::StatusOr<std::vector<KernelAddress>> RouteSocket::DumpAddresses() {
  int err = 0;
  for (int attempt = 0; attempt < kDumpAttempts; ++attempt) {
    ifaddrmsg request{};
    request.ifa_family = AF_UNSPEC;
    err = nl_send_simple(sock_.get(), RTM_GETADDR, NLM_F_DUMP, &request, sizeof(request));
    if (err < 0) {
      return NlStatus(err, "dump addresses");
    }
    // nl_socket_get_cb returns a new reference; the clone keeps the socket's own handlers intact.
    NlCbPtr socket_cb(nl_socket_get_cb(sock_.get()));
    NlCbPtr cb(nl_cb_clone(socket_cb.get()));
    if (cb == nullptr) {
      return absl::ResourceExhaustedError("dump addresses: out of memory");
    }
    std::vector<KernelAddress> addresses;
    nl_cb_set(cb.get(), NL_CB_VALID, NL_CB_CUSTOM, OnAddressMessage, &addresses);
    err = nl_recvmsgs(sock_.get(), cb.get());
    if (err >= 0) {
      return addresses;
    }
    if (err != -NLE_DUMP_INTR) {
      break;
    }
  }
  return NlStatus(err, "dump addresses");
}

absl::Status RouteSocket::AddAddress(int ifindex, const net::IpAddress& ip, int prefix_len,
                                     const AddressOptions& options) {
  const std::string op = absl::StrCat("add address ", AddressText(ip, prefix_len, ifindex));
  ASSIGN_OR_RETURN(RtnlAddrPtr addr, MakeAddr(ifindex, ip, prefix_len));
  if (ip.is_v4()) {
    rtnl_addr_set_scope(addr.get(), options.scope);
    if (!options.label.empty()) {
      if (int err = rtnl_addr_set_label(addr.get(), options.label.c_str()); err < 0) {
        return NlStatus(err, absl::StrCat(op, " label ", options.label));
      }
    }
  }
  if (options.flags != 0) {
    rtnl_addr_set_flags(addr.get(), options.flags);
  }
  nl_msg* raw = nullptr;
  if (int err = rtnl_addr_build_add_request(addr.get(), NLM_F_CREATE | NLM_F_EXCL, &raw); err < 0) {
    return NlStatus(err, op);
  }
  NlMsgPtr msg(raw);
  // libnl 3.7 has no setter for IFA_PROTO; append it to the request it built. Kernels before
  // 5.18 ignore the attribute.
  if (options.protocol != 0) {
    if (int err = nla_put_u8(msg.get(), IFA_PROTO, options.protocol); err < 0) {
      return NlStatus(err, op);
    }
  }
  // nl_send_sync frees the message whatever happens and waits for the kernel's ack.
  if (int err = nl_send_sync(sock_.get(), msg.release()); err < 0) {
    return NlStatus(err, op);
  }
  return absl::OkStatus();
}

absl::Status RouteSocket::DeleteAddress(const KernelAddress& address) {
  const std::string op =
      absl::StrCat("delete address ", AddressText(address.ip, address.prefix_len, address.ifindex));
  ASSIGN_OR_RETURN(RtnlAddrPtr addr, MakeAddr(address.ifindex, address.ip, address.prefix_len));
  if (int err = rtnl_addr_delete(sock_.get(), addr.get(), 0); err < 0) {
    return NlStatus(err, op);
  }
  return absl::OkStatus();
}

absl::Status RouteSocket::AddLocalRoute(int ifindex, const net::Cidr& range, uint8_t protocol) {
  ASSIGN_OR_RETURN(RtnlRoutePtr route, MakeLocalRoute(ifindex, range, protocol));
  if (int err = rtnl_route_add(sock_.get(), route.get(), NLM_F_CREATE | NLM_F_EXCL); err < 0) {
    return NlStatus(err,
                    absl::StrCat("add local route ", range.ToString(), " (ifindex ", ifindex, ")"));
  }
  return absl::OkStatus();
}

absl::Status RouteSocket::DeleteLocalRoute(int ifindex, const net::Cidr& range, uint8_t protocol) {
  ASSIGN_OR_RETURN(RtnlRoutePtr route, MakeLocalRoute(ifindex, range, protocol));
  if (int err = rtnl_route_delete(sock_.get(), route.get(), 0); err < 0) {
    // The kernel answers ESRCH (NLE_OBJ_NOTFOUND) for a route that is not there.
    return NlStatus(
        err, absl::StrCat("delete local route ", range.ToString(), " (ifindex ", ifindex, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<int, net::Cidr>>> RouteSocket::DumpLocalRoutes(
    uint8_t protocol) {
  nl_cache* raw = nullptr;
  // The route cache dumps every table of both families.
  if (int err = rtnl_route_alloc_cache(sock_.get(), AF_UNSPEC, 0, &raw); err < 0) {
    return NlStatus(err, "dump routes");
  }
  NlCachePtr cache(raw);
  std::vector<std::pair<int, net::Cidr>> out;
  for (nl_object* obj = nl_cache_get_first(cache.get()); obj != nullptr;
       obj = nl_cache_get_next(obj)) {
    auto* route = reinterpret_cast<rtnl_route*>(obj);
    if (rtnl_route_get_table(route) != RT_TABLE_LOCAL || rtnl_route_get_type(route) != RTN_LOCAL ||
        rtnl_route_get_protocol(route) != protocol || rtnl_route_get_nnexthops(route) < 1) {
      continue;
    }
    nl_addr* dst = rtnl_route_get_dst(route);
    if (dst == nullptr) {
      continue;
    }
    std::optional<net::IpAddress> ip = net::IpAddress::FromBytes(
        nl_addr_get_family(dst), nl_addr_get_binary_addr(dst), nl_addr_get_len(dst));
    std::optional<net::Cidr> range =
        ip ? net::Cidr::Make(*ip, static_cast<int>(nl_addr_get_prefixlen(dst))) : std::nullopt;
    if (range) {
      out.emplace_back(rtnl_route_nh_get_ifindex(rtnl_route_nexthop_n(route, 0)), *range);
    }
  }
  return out;
}

}  // namespace sluice::vip
