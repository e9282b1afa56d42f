// SPDX-License-Identifier: Apache-2.0
#include "lib/kube/bearer_token.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/base/clock.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::kube {

namespace {
constexpr size_t kMaxTokenBytes = 64 << 10;
}  // namespace

absl::StatusOr<std::unique_ptr<BearerToken>> BearerToken::Create(std::string fixed,
                                                                 std::string file,
                                                                 absl::Duration reload_period,
                                                                 const base::Clock& clock) {
  auto token = std::unique_ptr<BearerToken>(
      new BearerToken(std::move(fixed), std::move(file), reload_period, clock));
  if (token->from_file()) {
    absl::MutexLock lock(&token->mu_);
    RETURN_IF_ERROR(token->ReadLocked());
  }
  return token;
}

absl::Status BearerToken::ReadLocked() {
  ASSIGN_OR_RETURN(std::string text, base::ReadFile(file_, kMaxTokenBytes));
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", file_, " is empty"));
  }
  token_ = std::move(token);
  read_at_ = clock_.MonotonicNow();
  return absl::OkStatus();
}

std::string BearerToken::Get() {
  absl::MutexLock lock(&mu_);
  if (from_file() && clock_.MonotonicNow() - read_at_ >= reload_period_) {
    if (absl::Status st = ReadLocked(); !st.ok()) {
      if (!failing_) {
        LOG(WARNING) << "keeping the previous API token: " << st;
      }
      failing_ = true;
      read_at_ = clock_.MonotonicNow();  // retry after another period, not on every request
    } else {
      failing_ = false;
    }
  }
  return token_;
}

void BearerToken::Invalidate() {
  absl::MutexLock lock(&mu_);
  read_at_ = base::MonoTime::InfinitePast();
}

}  // namespace sluice::kube
