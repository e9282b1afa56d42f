// SPDX-License-Identifier: Apache-2.0
#include "lib/base/status.h"

#include <errno.h>
#include <string.h>

#include "absl/strings/str_cat.h"

namespace sluice::base {

namespace {

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOENT:
    case ESRCH:
    case ENODEV:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case EINVAL:
    case EBADF:
      return absl::StatusCode::kInvalidArgument;
    case EAGAIN:
    case EINTR:
    case ECONNREFUSED:
    case ECONNRESET:
    case ETIMEDOUT:
      return absl::StatusCode::kUnavailable;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case ENOSPC:
    case ENOBUFS:
      return absl::StatusCode::kResourceExhausted;
    case ENOSYS:
    case EOPNOTSUPP:
    case EAFNOSUPPORT:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status ErrnoStatus(int err, std::string_view op) {
  char buf[128];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return absl::Status(CodeForErrno(err), absl::StrCat(std::string(op), ": ", msg));
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) {
    return status;
  }
  return absl::Status(status.code(),
                      absl::StrCat(std::string(context), ": ", std::string(status.message())));
}

}  // namespace sluice::base
