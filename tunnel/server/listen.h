// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "absl/status/statusor.h"

#include "agent/base/unique_fd.h"

namespace sluice::tunnel::server {

// A non-blocking listening TCP socket on host:port ("" = all addresses, port 0 = any).
absl::StatusOr<base::UniqueFd> ListenTcp(const std::string& host, int port);

// Makes `path` free for a Unix socket: a stale socket file is removed; any other file is
// removed only with `delete_existing`, else it is an error.
absl::Status PrepareUnixPath(const std::string& path, bool delete_existing);

// A non-blocking listening Unix socket at `path` with file mode 0770 (the frontend's only
// access control, as upstream).
absl::StatusOr<base::UniqueFd> ListenUnix(const std::string& path, bool delete_existing);

}  // namespace sluice::tunnel::server
