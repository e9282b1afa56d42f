// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace sluice::tunnel::server {

namespace {

// Sets the process umask for its lifetime: a socket file takes mode 0777 & ~umask at bind(2).
// The umask is process-wide, so this is held only around that one call, at startup.
class ScopedUmask final {
 public:
  explicit ScopedUmask(mode_t mask) : saved_(umask(mask)) {}
  ~ScopedUmask() { umask(saved_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  const mode_t saved_;
};

}  // namespace

absl::StatusOr<base::UniqueFd> ListenTcp(const std::string& host, int port, bool reuseport) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen ", host, ":", port, ": ", gai_strerror(rc)));
  }
  base::UniqueFd fd(
      socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  int one = 1;
  int err = 0;
  if (!fd) {
    err = errno;
  } else if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
             (reuseport &&
              setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0) ||
             bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0 || listen(fd.get(), 4096) != 0) {
    err = errno;
  }
  freeaddrinfo(res);
  if (err != 0) {
    return base::ErrnoStatus(err, absl::StrCat("listen ", host, ":", port));
  }
  return fd;
}

absl::Status PrepareUnixPath(const std::string& path, bool delete_existing) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return absl::OkStatus();
  }
  if (!S_ISSOCK(st.st_mode) && !delete_existing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "listen unix ", path, ": exists and is not a socket (see --delete-existing-uds-file)"));
  }
  if (unlink(path.c_str()) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("unlink ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<base::UniqueFd> ListenUnix(const std::string& path, bool delete_existing) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("listen unix ", path, ": path too long"));
  }
  RETURN_IF_ERROR(PrepareUnixPath(path, delete_existing));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  base::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    return base::ErrnoStatus(errno, "socket(AF_UNIX)");
  }
  int rc;
  {
    ScopedUmask mode(0007);  // 0770
    rc = bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (rc != 0 || listen(fd.get(), 4096) != 0) {
    return base::ErrnoStatus(errno, absl::StrCat("listen unix ", path));
  }
  return fd;
}

}  // namespace sluice::tunnel::server
