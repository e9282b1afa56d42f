// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/stat.h>

#include <string>

#include "absl/status/statusor.h"

#include "agent/base/unique_fd.h"

namespace sluice::tunnel::server {

// A non-blocking listening TCP socket on host:port ("" = all addresses, port 0 = any).
absl::StatusOr<base::UniqueFd> ListenTcp(const std::string& host, int port);

// Makes `path` free for a Unix socket: a stale socket file is removed; any other file is
// removed only with `delete_existing`, else it is an error.
absl::Status PrepareUnixPath(const std::string& path, bool delete_existing);

// Sets the process umask for its lifetime. A socket file takes its mode from bind(2), as
// 0777 & ~umask; a chmod after bind would leave a window in which it is as open as the umask
// let it be, so the mode is set by the umask around bind instead. The umask is process-wide:
// hold this only around the one call that binds, at startup. Thread: any, briefly.
class ScopedUmask final {
 public:
  explicit ScopedUmask(mode_t mask) : saved_(umask(mask)) {}
  ~ScopedUmask() { umask(saved_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  const mode_t saved_;
};
// The frontend's Unix socket is 0770: owner and group may connect (its only access control,
// as upstream's).
inline constexpr mode_t kUnixSocketUmask = 0007;

// A non-blocking listening Unix socket at `path`, created with file mode 0770.
absl::StatusOr<base::UniqueFd> ListenUnix(const std::string& path, bool delete_existing);

}  // namespace sluice::tunnel::server
