// SPDX-License-Identifier: Apache-2.0
#include "tunnel/server/token_check.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/strings.h"
#include "simdjson.h"
#include <openssl/sha.h>

namespace sluice::tunnel::server {
namespace {

bool IsBase64Url(absl::string_view part) {
  for (char c : part) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return false;
    }
  }
  return !part.empty();
}

// A JWT part decoded and parsed as a JSON object, or false.
bool DecodeObject(absl::string_view part, simdjson::dom::parser& parser,
                  simdjson::dom::object* out) {
  std::string json;
  return IsBase64Url(part) && absl::WebSafeBase64Unescape(part, &json) &&
         parser.parse(json).get(*out) == simdjson::SUCCESS;
}

}  // namespace

absl::StatusOr<absl::Time> PreCheckToken(std::string_view token, absl::Time now) {
  if (token.size() > kMaxTokenBytes) {
    return absl::UnauthenticatedError(
        absl::StrCat("bearer token of ", token.size(), " bytes (limit ", kMaxTokenBytes, ")"));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(base::Absl(token), '.');
  simdjson::dom::parser parser;
  simdjson::dom::object header;
  simdjson::dom::object payload;
  if (parts.size() != 3 || !IsBase64Url(parts[2]) || !DecodeObject(parts[0], parser, &header)) {
    return absl::UnauthenticatedError("bearer token is not a JWT");
  }
  // The parser's buffers back the header; a second parser keeps both valid.
  simdjson::dom::parser payload_parser;
  if (!DecodeObject(parts[1], payload_parser, &payload)) {
    return absl::UnauthenticatedError("bearer token is not a JWT (payload)");
  }
  double exp = 0;
  // Legacy secret-based tokens have none; an absurd one (past year 9999) counts as none too.
  if (payload["exp"].get(exp) != simdjson::SUCCESS || !(exp < 253402300800.0)) {
    return absl::InfiniteFuture();
  }
  const absl::Time expiry =
      exp <= 0 ? absl::UnixEpoch() : absl::FromUnixSeconds(static_cast<int64_t>(exp));
  if (expiry <= now) {
    return absl::UnauthenticatedError(
        absl::StrCat("bearer token expired at ", absl::FormatTime(expiry)));
  }
  return expiry;
}

TokenDigest DigestOf(std::string_view token) {
  TokenDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

const ReviewResult* VerdictCache::Lookup(const TokenDigest& digest, absl::Time now) {
  auto it = entries_.find(digest);
  if (it == entries_.end()) {
    return nullptr;
  }
  if (it->second.until <= now) {
    entries_.erase(it);
    return nullptr;
  }
  return &it->second.result;
}

void VerdictCache::Store(const TokenDigest& digest, const ReviewResult& result,
                         absl::Time token_expiry, absl::Time now) {
  if (!result.ok() && absl::IsUnavailable(result.status())) {
    return;  // the API server's trouble is no verdict on the token
  }
  const absl::Time until =
      result.ok() ? std::min(token_expiry, now + max_ttl_) : now + negative_ttl_;
  if (until <= now || capacity_ == 0) {
    return;
  }
  if (!entries_.contains(digest) && entries_.size() >= capacity_ && !MakeRoom(result.ok(), now)) {
    return;
  }
  entries_.insert_or_assign(digest, Entry{result, until});
}

bool VerdictCache::MakeRoom(bool positive, absl::Time now) {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.until <= now) {
      victim = it;
      break;
    }
    if (!it->second.result.ok() && victim == entries_.end()) {
      victim = it;
    }
  }
  if (victim == entries_.end() && positive) {
    victim = entries_.begin();  // all accepted and fresh: any one may be asked again
  }
  if (victim == entries_.end()) {
    return false;
  }
  entries_.erase(victim);
  return true;
}

}  // namespace sluice::tunnel::server
