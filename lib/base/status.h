// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::base {

// Maps an errno value to an absl status code and formats "<op>: <strerror>".
absl::Status ErrnoStatus(int err, std::string_view op);

// Prefixes a status message with context, keeping the code: "<context>: <message>".
absl::Status Annotate(const absl::Status& status, std::string_view context);

}  // namespace sluice::base

// Debian 12's abseil (20220623) ships neither macro, so we own small versions.
#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    if (absl::Status _st = (expr); !_st.ok()) \
      return _st;                             \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(_status_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok())                               \
    return std::move(tmp).status();            \
  lhs = std::move(tmp).value()
