// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "lib/base/unique_fd.h"

namespace sluice::tunnel::server {

// A non-blocking listening TCP socket on host:port ("" = all addresses, port 0 = any).
// `reuseport`: SO_REUSEPORT, as gRPC sets on its listeners, so that servers of one user may share
// a port (the kernel spreads connections among them).
absl::StatusOr<base::UniqueFd> ListenTcp(const std::string& host, int port, bool reuseport = false);

// Makes `path` free for a Unix socket: a stale socket file is removed; any other file is
// removed only with `delete_existing`, else it is an error.
absl::Status PrepareUnixPath(const std::string& path, bool delete_existing);

// A non-blocking listening Unix socket at `path`, created with file mode 0770: owner and group
// may connect (the frontend's only access control, as upstream's). The mode comes from the
// umask around bind(2), never from a chmod after it, which would leave a window in which the
// socket is as open as the process umask lets it be.
absl::StatusOr<base::UniqueFd> ListenUnix(const std::string& path, bool delete_existing);

}  // namespace sluice::tunnel::server
