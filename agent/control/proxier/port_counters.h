// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <string_view>

namespace sluice::proxier {

// The service port a kernel service name "<port>#<side and family>" belongs to.
inline std::string_view PortOf(std::string_view name) { return name.substr(0, name.rfind('#')); }

// Sums a consumer's per kernel service counters per service port. `for_each(fn)` calls
// fn(name, counts) in name order, so a port's names come one after another ('#' is in no port
// name); `emit(port, sum)` is then called once per port, in order, `add(sum, counts)` summing.
// No map is built: at 10,000 services a scrape summed through one.
template <typename Counts, typename ForEach, typename Add, typename Emit>
void SumByPort(ForEach&& for_each, Add&& add, Emit&& emit) {
  std::string port;  // the names belong to for_each: the current port is copied
  Counts sum{};
  bool any = false;
  for_each([&](const std::string& name, const Counts& counts) {
    const std::string_view p = PortOf(name);
    if (any && p != port) {
      emit(std::string_view(port), static_cast<const Counts&>(sum));
      sum = Counts{};
    }
    if (!any || p != port) {
      port.assign(p);
      any = true;
    }
    add(sum, counts);
  });
  if (any) {
    emit(std::string_view(port), static_cast<const Counts&>(sum));
  }
}

}  // namespace sluice::proxier
