// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace sluice::testutil {

// A fresh child cgroup of the cgroup v2 root with this whole process moved into it, so that
// programs attached there see only the test and what it spawns, never the machine. The
// destructor moves the process back and removes the cgroup (after its children have exited).
// Thread: the test's.
class TestCgroup final {
 public:
  // NotFound without cgroup v2; PermissionDenied without root.
  static absl::StatusOr<std::unique_ptr<TestCgroup>> Create();
  ~TestCgroup();
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;

  const std::string& path() const { return path_; }

 private:
  TestCgroup(std::string path, std::string original)
      : path_(std::move(path)), original_(std::move(original)) {}
  std::string path_;
  std::string original_;  // the cgroup directory the process came from
};

// A private bpffs instance mounted on a new temporary directory, for --bpf-root: whatever the
// agent pins there goes when the destructor unmounts it (links detach once unreferenced).
class TestBpfFs final {
 public:
  static absl::StatusOr<std::unique_ptr<TestBpfFs>> Create();
  ~TestBpfFs();
  TestBpfFs(const TestBpfFs&) = delete;
  TestBpfFs& operator=(const TestBpfFs&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit TestBpfFs(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace sluice::testutil
