// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/extnat/scratch_net.h"

#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"

namespace sluice::extnat::scratch {
namespace {

// One rtnetlink request, built in place (man 7 rtnetlink, man 3 rtnetlink).
class Request final {
 public:
  Request(uint16_t type, uint16_t flags) : buf_(NLMSG_HDRLEN) {
    hdr()->nlmsg_type = type;
    hdr()->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  }
  template <typename T>
  void Put(const T& body) {
    Append(&body, sizeof(body));
  }
  void Attr(uint16_t type, const void* data, size_t len) {
    const rtattr rta{.rta_len = static_cast<unsigned short>(RTA_LENGTH(len)), .rta_type = type};
    Append(&rta, sizeof(rta));
    Append(data, len);
  }
  void Attr(uint16_t type, const std::string& s) { Attr(type, s.c_str(), s.size() + 1); }
  // Opens a nested attribute; Close(at) sets its length once its contents are in.
  size_t Open(uint16_t type) {
    const size_t at = buf_.size();
    Attr(type, nullptr, 0);
    return at;
  }
  void Close(size_t at) {
    reinterpret_cast<rtattr*>(buf_.data() + at)->rta_len =
        static_cast<unsigned short>(buf_.size() - at);
  }
  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }

  // Sends it on a new socket of this thread's namespace and reads the kernel's answer.
  absl::Status Send(const std::string& what) {
    hdr()->nlmsg_len = static_cast<uint32_t>(buf_.size());
    base::UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!fd) {
      return base::ErrnoStatus(errno, "socket(NETLINK_ROUTE)");
    }
    sockaddr_nl kernel{.nl_family = AF_NETLINK};
    if (sendto(fd.get(), buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof(kernel)) < 0) {
      return base::ErrnoStatus(errno, what);
    }
    alignas(nlmsghdr) char reply[4096];
    const ssize_t n = recv(fd.get(), reply, sizeof(reply), 0);
    if (n < 0) {
      return base::ErrnoStatus(errno, what);
    }
    const auto* h = reinterpret_cast<const nlmsghdr*>(reply);
    if (!NLMSG_OK(h, static_cast<size_t>(n)) || h->nlmsg_type != NLMSG_ERROR) {
      return absl::InternalError(absl::StrCat(what, ": unexpected netlink reply"));
    }
    const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
    return err == 0 ? absl::OkStatus() : base::ErrnoStatus(err, what);
  }

 private:
  void Append(const void* data, size_t len) {
    const size_t at = buf_.size();
    buf_.resize(at + NLMSG_ALIGN(len));
    if (len > 0) {
      std::memcpy(buf_.data() + at, data, len);
    }
  }
  std::vector<char> buf_;
};

absl::StatusOr<int> Index(const std::string& device) {
  const unsigned index = if_nametoindex(device.c_str());
  if (index == 0) {
    return base::ErrnoStatus(errno, absl::StrCat("if_nametoindex(", device, ")"));
  }
  return static_cast<int>(index);
}

}  // namespace

absl::Status AddVeth(const std::string& name, const std::string& peer, int peer_netns_fd) {
  Request r(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  r.Put(ifinfomsg{.ifi_family = AF_UNSPEC});
  r.Attr(IFLA_IFNAME, name);
  const size_t info = r.Open(IFLA_LINKINFO);
  r.Attr(IFLA_INFO_KIND, std::string("veth"));
  const size_t data = r.Open(IFLA_INFO_DATA);
  const size_t peer_info = r.Open(VETH_INFO_PEER);
  r.Put(ifinfomsg{.ifi_family = AF_UNSPEC});
  r.Attr(IFLA_IFNAME, peer);
  const uint32_t ns = static_cast<uint32_t>(peer_netns_fd);
  r.Attr(IFLA_NET_NS_FD, &ns, sizeof(ns));
  r.Close(peer_info);
  r.Close(data);
  r.Close(info);
  return r.Send(absl::StrCat("add veth ", name, "/", peer));
}

absl::Status AddAddress(const std::string& device, const net::Cidr& address) {
  ASSIGN_OR_RETURN(const int index, Index(device));
  const net::IpAddress& ip = address.base();
  Request r(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  r.Put(ifaddrmsg{.ifa_family = static_cast<unsigned char>(ip.family()),
                  .ifa_prefixlen = static_cast<unsigned char>(address.prefix()),
                  // No duplicate address detection: usable at once.
                  .ifa_flags = static_cast<unsigned char>(ip.is_v4() ? 0 : IFA_F_NODAD),
                  .ifa_scope = RT_SCOPE_UNIVERSE,
                  .ifa_index = static_cast<uint32_t>(index)});
  r.Attr(IFA_LOCAL, ip.bytes(), ip.byte_length());
  r.Attr(IFA_ADDRESS, ip.bytes(), ip.byte_length());
  return r.Send(absl::StrCat("add address ", address.ToString(), " to ", device));
}

absl::Status SetUp(const std::string& device) {
  ASSIGN_OR_RETURN(const int index, Index(device));
  Request r(RTM_NEWLINK, 0);
  r.Put(ifinfomsg{
      .ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP});
  return r.Send(absl::StrCat("set ", device, " up"));
}

}  // namespace sluice::extnat::scratch
