// SPDX-License-Identifier: Apache-2.0
#include "lib/base/process_metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/base/unique_fd.h"

namespace sluice::base {
namespace {

// A command with spaces and parentheses must not shift the fields that follow it.
TEST(ProcessMetricsTest, ParsesStatAfterTheCommand) {
  const std::string stat =
      "4242 (a) (b c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1000 "
      "104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
  auto s = ParseProcStat(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0);
  EXPECT_DOUBLE_EQ(s->start_time_seconds, 1.7e9 + 10);
  EXPECT_DOUBLE_EQ(s->virtual_bytes, 104857600);
  EXPECT_DOUBLE_EQ(s->resident_bytes, 2560.0 * 4096);
  EXPECT_FALSE(ParseProcStat("no parenthesis", 100, 4096, 0).has_value());
  EXPECT_FALSE(ParseProcStat("1 (x) S 1 2", 100, 4096, 0).has_value());
}

double Value(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(name.size() + 1));
    }
  }
  return -1;
}

// This process, as the Go client would report it: the TYPE and HELP lines, a start time in the
// past, memory in use, and an fd opened here counted.
TEST(ProcessMetricsTest, ReportsThisProcess) {
  Registry registry;
  AddProcessMetrics(registry);
  const std::string before = registry.Render();
  EXPECT_NE(before.find("# HELP process_cpu_seconds_total Total user and system CPU time spent in "
                        "seconds.\n# TYPE process_cpu_seconds_total counter\n"),
            std::string::npos)
      << before;
  EXPECT_NE(before.find("# TYPE process_resident_memory_bytes gauge\n"), std::string::npos);
  EXPECT_GT(Value(before, "process_resident_memory_bytes"), 0);
  EXPECT_GE(Value(before, "process_virtual_memory_bytes"),
            Value(before, "process_resident_memory_bytes"));
  EXPECT_GT(Value(before, "process_max_fds"), 0);
  const double start = Value(before, "process_start_time_seconds");
  EXPECT_GT(start, 1.6e9);
  EXPECT_LE(start, static_cast<double>(time(nullptr)) + 1);
  UniqueFd extra(open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(Value(registry.Render(), "process_open_fds"), Value(before, "process_open_fds") + 1);
}

// The count (from the directory's size where the kernel gives it) is what a walk of
// /proc/self/fd lists, less the walk's own fd.
TEST(ProcessMetricsTest, OpenFdsMatchesTheFdDirectory) {
  Registry registry;
  AddProcessMetrics(registry);
  std::vector<UniqueFd> extra;
  for (int i = 0; i < 5; ++i) {
    extra.emplace_back(open("/dev/null", O_RDONLY | O_CLOEXEC));
  }
  const double reported = Value(registry.Render(), "process_open_fds");
  DIR* dir = opendir("/proc/self/fd");
  ASSERT_NE(dir, nullptr);
  double listed = -1;  // the directory's own fd
  while (const dirent* e = readdir(dir)) {
    listed += e->d_name[0] != '.';
  }
  closedir(dir);
  EXPECT_EQ(reported, listed);
}

}  // namespace
}  // namespace sluice::base
