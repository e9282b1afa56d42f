// SPDX-License-Identifier: Apache-2.0
#include "tests/testutil/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

#include "tests/testutil/process.h"

namespace sluice::testutil {

namespace {

// /proc/thread-self, not /proc/self: the namespace is the calling thread's.
constexpr char kThreadNetNs[] = "/proc/thread-self/ns/net";

absl::Status SetLoopbackUp() {
  base::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket(AF_INET)");
  }
  ifreq request{};
  strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(fd.get(), SIOCGIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, "ioctl(SIOCGIFFLAGS lo)");
  }
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  if (ioctl(fd.get(), SIOCSIFFLAGS, &request) < 0) {
    return base::ErrnoStatus(errno, "ioctl(SIOCSIFFLAGS lo up)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetNs>> NetNs::Create() {
  base::UniqueFd original(open(kThreadNetNs, O_RDONLY | O_CLOEXEC));
  if (!original) {
    return base::ErrnoStatus(errno, absl::StrCat("open ", kThreadNetNs));
  }
  if (unshare(CLONE_NEWNET) < 0) {
    return base::ErrnoStatus(errno, "unshare(CLONE_NEWNET)");
  }
  base::UniqueFd created(open(kThreadNetNs, O_RDONLY | O_CLOEXEC));
  // From here on the thread is inside; the object's destructor takes it back on every path.
  std::unique_ptr<NetNs> netns(new NetNs(std::move(original), std::move(created)));
  if (!netns->created_) {
    return base::ErrnoStatus(errno, absl::StrCat("open new ", kThreadNetNs));
  }
  RETURN_IF_ERROR(SetLoopbackUp());
  return netns;
}

NetNs::~NetNs() {
  if (setns(original_.get(), CLONE_NEWNET) < 0) {
    // The test thread would go on in the wrong namespace; nothing sensible can follow.
    SLUICE_CHECK(false) << "setns back to the original network namespace: " << strerror(errno);
  }
}

absl::StatusOr<std::unique_ptr<PeerHost>> PeerHost::Create(
    const std::string& tag, const std::vector<std::string>& local_addresses,
    const std::vector<std::string>& peer_addresses, const std::vector<std::string>& gateways) {
  auto run = [](std::vector<std::string> argv) -> absl::Status {
    std::string out;
    if (RunCommand(argv, &out) != 0) {
      return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), ": ", out));
    }
    return absl::OkStatus();
  };
  const std::string name = absl::StrCat("sluice-", tag, "-", getpid());
  RETURN_IF_ERROR(run({"ip", "netns", "add", name}));
  std::unique_ptr<PeerHost> host(new PeerHost(name));  // deletes the namespace on every path
  const std::string here = tag + "0", there = tag + "1";
  RETURN_IF_ERROR(
      run({"ip", "link", "add", here, "type", "veth", "peer", "name", there, "netns", name}));
  RETURN_IF_ERROR(run({"ip", "link", "set", here, "up"}));
  RETURN_IF_ERROR(run(host->Exec({"ip", "link", "set", "lo", "up"})));
  RETURN_IF_ERROR(run(host->Exec({"ip", "link", "set", there, "up"})));
  auto add = [](const std::string& address, const std::string& dev) {
    std::vector<std::string> argv = {"ip", "addr", "add", address, "dev", dev};
    if (address.find(':') != std::string::npos) {
      argv.push_back("nodad");  // usable at once, not "tentative" for a second
    }
    return argv;
  };
  for (const auto& a : local_addresses) {
    RETURN_IF_ERROR(run(add(a, here)));
  }
  for (const auto& a : peer_addresses) {
    RETURN_IF_ERROR(run(host->Exec(add(a, there))));
  }
  for (const auto& gw : gateways) {
    RETURN_IF_ERROR(run(host->Exec({"ip", gw.find(':') != std::string::npos ? "-6" : "-4", "route",
                                    "add", "default", "via", gw})));
  }
  return host;
}

PeerHost::~PeerHost() { RunCommand({"ip", "netns", "del", name_}); }

std::vector<std::string> PeerHost::Exec(std::vector<std::string> argv) const {
  argv.insert(argv.begin(), {"ip", "netns", "exec", name_});
  return argv;
}

std::string Curl(const std::string& url, const PeerHost* from) {
  std::vector<std::string> argv = {"curl", "-sS", "--max-time", "5", url};
  if (from != nullptr) {
    argv = from->Exec(std::move(argv));
  }
  std::string out;
  const int rc = RunCommand(std::move(argv), &out);
  return rc == 0 ? out : absl::StrCat("exit ", rc);
}

}  // namespace sluice::testutil
