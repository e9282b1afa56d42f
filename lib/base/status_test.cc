// SPDX-License-Identifier: Apache-2.0
#include "lib/base/status.h"

#include <errno.h>

#include "gtest/gtest.h"

namespace sluice::base {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2) {
    return absl::InvalidArgumentError("odd");
  }
  return x / 2;
}

absl::Status UseMacros(int x, int* out) {
  ASSIGN_OR_RETURN(int h, Half(x));
  RETURN_IF_ERROR(h > 10 ? absl::OutOfRangeError("big") : absl::OkStatus());
  *out = h;
  return absl::OkStatus();
}

TEST(StatusTest, ErrnoMapsCodeAndMessage) {
  absl::Status st = ErrnoStatus(EACCES, "open(/x)");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(), "open(/x): Permission denied");
  EXPECT_EQ(ErrnoStatus(EMFILE, "accept").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Annotate(st, "load").message(), "load: open(/x): Permission denied");
}

TEST(StatusTest, Macros) {
  int out = 0;
  EXPECT_TRUE(UseMacros(8, &out).ok());
  EXPECT_EQ(out, 4);
  EXPECT_EQ(UseMacros(3, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UseMacros(40, &out).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace sluice::base
