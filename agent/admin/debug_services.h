// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

#include "agent/proxier/service_table.h"

namespace sluice::admin {

// /debug/services: the programmed table as JSON, one object per service port, sorted.
std::string RenderDebugServices(const proxier::ServiceTable& table);

// A JSON string literal with the required escapes.
std::string JsonString(const std::string& s);

}  // namespace sluice::admin
