// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string_view>

#include "lib/base/metrics.h"

namespace sluice::base {

// What the Prometheus client's process collector reports, read from /proc/self at scrape time.
struct ProcessStats {
  double cpu_seconds = 0;         // user + system
  double virtual_bytes = 0;       // vsize
  double resident_bytes = 0;      // rss pages x page size
  double start_time_seconds = 0;  // since the epoch: boot time + start ticks
};

// Parses the text of /proc/<pid>/stat, given the clock ticks per second, the page size and the
// boot time (/proc/stat "btime"). nullopt when the text is not a stat line.
std::optional<ProcessStats> ParseProcStat(std::string_view stat, long ticks_per_second,
                                          long page_size, double boot_time_seconds);

// Registers process_cpu_seconds_total, process_open_fds, process_max_fds,
// process_virtual_memory_bytes, process_virtual_memory_max_bytes, process_resident_memory_bytes
// and process_start_time_seconds with the names, types and HELP texts of the Prometheus Go
// client (what kube-proxy and Konnectivity expose), so node alerts on memory, CPU and fds work.
void AddProcessMetrics(Registry& registry);

}  // namespace sluice::base
