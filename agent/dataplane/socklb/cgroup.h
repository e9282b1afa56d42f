// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::socklb {

// Where cgroup v2 is mounted (first cgroup2 line of /proc/self/mountinfo), e.g.
// "/sys/fs/cgroup" or, on a hybrid layout, "/sys/fs/cgroup/unified". NotFound without one.
absl::StatusOr<std::string> FindCgroup2Mount();

// The cgroup id of a cgroup v2 directory (its inode number, as bpf link info reports it).
// FailedPrecondition when `dir` is not on a cgroup2 filesystem.
absl::StatusOr<uint64_t> Cgroup2Id(const std::string& dir);

// The cgroup v2 directory to attach to for `dir`: `dir` itself, or on a hybrid layout (cgroup
// v1 controllers on a tmpfs, cgroup2 below it), `dir`/unified. FailedPrecondition naming both
// when neither is cgroup v2.
absl::StatusOr<std::string> ResolveCgroup2(const std::string& dir);

// Makes ResolveCgroup2(`dir`) succeed: where neither `dir` nor `dir`/unified is cgroup v2 (a
// host with cgroup v1 only), mounts cgroup2 on `dir`/unified, systemd's hybrid layout, and logs
// it. For --init-only, in a container whose `dir` is the host's (Bidirectional propagation).
absl::StatusOr<std::string> EnsureCgroup2(const std::string& dir);

// Whether `dir` is the root of the cgroup v2 hierarchy: only non-root cgroups have a
// cgroup.type file. A mount inside a container's cgroup namespace shows the container's own
// cgroup, which is not the root: programs attached there miss the node's other processes.
bool IsHierarchyRoot(const std::string& dir);

// Whether this process is in `dir` or a cgroup below it (cgroup v2 membership).
bool InCgroupSubtree(const std::string& dir);

}  // namespace sluice::socklb
